"""One rank of a sharded measurement (``torchrun ... -m memfit.measure.sharded_worker REQUEST OUT``).

How each sharding is built, with torch 2.13.0's own APIs, the way the Trainer / accelerate build them:

========  ==========================================================================================
``ddp``   ``DistributedDataParallel(model, bucket_cap_mb=spec.bucket_mb)`` (gradient_as_bucket_view
          False, torch's default: the buckets are a second copy of the gradients)
``zero1`` DDP as above + ``ZeroRedundancyOptimizer(params, optimizer_class=AdamW)``: each rank keeps the
          optimizer state of its own partition of the parameters and broadcasts them after its step
``zero2`` ``fully_shard`` per decoder layer, then the root (torchtitan's ``apply_fsdp``, and the issue's
          recipe), all with ``reshard_after_forward=False`` (FSDP2's SHARD_GRAD_OP: the gathered layers stay
          from the forward to the backward)
``zero3`` / ``fsdp``  the same with ``reshard_after_forward=True`` (FULL_SHARD)
``hsdp``  ``fully_shard`` on a 2-D mesh ``(nodes, gpus / nodes)`` = (replicate, shard)
========  ==========================================================================================

``--fsdp-wrap accelerate`` builds accelerate 1.15.0's units instead (``fsdp2_prepare_model``, what the Trainer's
FSDP2 runs): two more units, the untied input embedding and the tail [final norm, lm_head] kept gathered
(``reshard_after_forward=False``), the root left to torch's default (:func:`fsdp_units`): measured on scaled
Pythia-1.4B (4 layers, 2 ranks), 822,042,976 B per rank against 1,028,096,352 B with the root holding them.

The decoder layers are the modules whose class is in the model's ``_no_split_modules`` (what accelerate's
FSDP auto-wrap policy reads). ``--precision mixed-bf16`` adds a ``MixedPrecisionPolicy`` (fp32 sharded
parameters gathered in bf16; :func:`mixed_precision_policy`: torchtitan's fp32 reduce, or accelerate's bf16 one;
gloo all-gathers and reduce-scatters bf16 on CPU in torch 2.13.0). ``--method lora`` shards the PEFT model as it
is: the frozen base and the adapters in the same units (FSDP2 takes groups mixing frozen and trainable
parameters). The tracker is entered before the model is wrapped, so everything the wrapper
allocates (DDP's buckets, FSDP2's sharded parameters) is counted; sharded parameters are DTensors and count
their local shard (:func:`memfit.runtime.ledger.local_of`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from memfit.estimate.category import Category
from memfit.estimate.spec import RunSpec
from memfit.runtime.build import build_model
from memfit.runtime.step import LEARNING_RATE, make_optimizer, run_step
from memfit.runtime.tracker import TRACKED_CATEGORIES, LiveTensorTracker


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: modules whose class name is in ``_no_split_modules`` (transformers 5.24.0)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def sharding_mesh(spec: RunSpec, device: str) -> Any:
    """FSDP2's device mesh for ``spec``: ``(gpus,)``, or ``(nodes, gpus / nodes)`` = (replicate, shard) for hsdp.
    Made outside any ``FakeTensorMode`` (the mesh reads its rank table's values)."""
    from torch.distributed.device_mesh import init_device_mesh

    if spec.sharding == "hsdp":
        return init_device_mesh(device, (spec.nodes, spec.gpus // spec.nodes), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device, (spec.gpus,))


def shard_model(model: torch.nn.Module, spec: RunSpec, device: str, *, mesh: Any = None,
                init_sync: bool = True) -> torch.nn.Module:
    """``model`` wrapped as ``spec.sharding`` says (the module docstring); returns what the step calls.
    ``mesh``: FSDP2's mesh when made beforehand (:func:`sharding_mesh`; the trace makes it outside its fake mode);
    ``init_sync=False``: DDP skips its start-up shape check and broadcast (the trace's fake backend has no data)."""
    if spec.sharding in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=spec.bucket_mb, init_sync=init_sync,
                                       device_ids=[torch.cuda.current_device()] if device == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    mesh = sharding_mesh(spec, device) if mesh is None else mesh
    reshard = spec.reshard_after_forward if spec.reshard_after_forward is not None else spec.sharding != "zero2"
    kw: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard}
    if spec.precision == "mixed-bf16":
        kw["mp_policy"] = mixed_precision_policy(spec)
    for unit, unit_kw in fsdp_units(model, spec):
        fully_shard(unit, **{**kw, **unit_kw})
    return model


def mixed_precision_policy(spec: RunSpec) -> Any:
    """FSDP2's policy for ``--precision mixed-bf16`` (fp32 sharded parameters, gathered in bf16): torchtitan's
    ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` with ``--fsdp-wrap layers``; accelerate
    1.15.0's with ``--fsdp-wrap accelerate`` (``mixed_precision="bf16"``: ``FullyShardedDataParallelPlugin.
    set_mixed_precision`` gives ``param_dtype = reduce_dtype = output_dtype = bfloat16``)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if spec.fsdp_wrap == "accelerate":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                    output_dtype=torch.bfloat16)
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def fsdp_units(model: torch.nn.Module, spec: RunSpec) -> list[tuple[Any, dict[str, Any]]]:
    """FSDP2's units in the order ``fully_shard`` is applied, each with its own keyword overrides.

    ``--fsdp-wrap layers``: each decoder layer, then the root. ``--fsdp-wrap accelerate`` mirrors accelerate
    1.15.0 ``fsdp2_prepare_model`` (utils/fsdp_utils.py) with the Trainer's transformer-based wrap: each decoder
    layer; the input embedding when untied; the tail ``[final norm, (input embedding if tied), lm_head]`` with
    ``reshard_after_forward=False``; the root with torch's default (``None``: False for the root), holding what
    is left (no parameter in a causal LM)."""
    from memfit.errors import MemfitError

    layers = decoder_layers(model)
    if not layers:
        raise MemfitError(f"{type(model).__name__} names no decoder layer class (_no_split_modules): it cannot be "
                          "sharded per layer")
    units: list[tuple[Any, dict[str, Any]]] = [(layer, {}) for layer in layers]
    if spec.fsdp_wrap == "layers":
        return [*units, (model, {})]
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and embed.weight is head.weight
    if not tied:
        units.append((embed, {}))
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    norms = [m for _, m in base.named_children() if "Norm" in type(m).__name__]  # accelerate's _find_final_norm
    tail = [m for m in (norms[-1] if norms else None, *((embed,) if tied else ()), head) if m is not None]
    units.append((tail, {"reshard_after_forward": False}))
    units.append((model, {"reshard_after_forward": None}))
    return units


def sharded_optimizer(model: torch.nn.Module, spec: RunSpec) -> tuple[Any, Any]:
    """(the optimizer the step calls, the one holding the state): ZeRO-1's wrapper and its local optimizer."""
    if spec.sharding != "zero1":
        opt = make_optimizer(model, spec)
        return opt, opt
    from torch.distributed.optim import ZeroRedundancyOptimizer

    params = [p for p in model.parameters() if p.requires_grad]
    if spec.optimizer == "adamw":
        zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=LEARNING_RATE, weight_decay=0.0)
    else:
        zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=LEARNING_RATE,
                                       momentum=0.9 if spec.optimizer == "sgd-momentum" else 0.0)
    return zero, zero.optim


@contextlib.contextmanager
def fsdp_resizes_seen(tracker: LiveTensorTracker) -> Iterator[None]:
    """Let ``tracker`` see FSDP2's frees: torch 2.13.0's ``_fsdp_param.free_storage`` / ``alloc_storage`` release
    and re-grow the gathered parameters with ``UntypedStorage.resize_``, which goes through no dispatcher op, so a
    dispatch mode alone would count every gathered layer as alive for the whole run. Each call is followed by
    ``tracker.track_tensors([t])``, which books the storage's new size (a resize event)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    alloc, free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def seen_alloc(t: torch.Tensor) -> None:
        alloc(t)
        tracker.track_tensors([t])

    def seen_free(t: torch.Tensor) -> None:
        free(t)
        tracker.track_tensors([t])

    _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = seen_alloc
    _fsdp_param.free_storage = seen_free
    try:
        yield
    finally:
        _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = alloc
        _fsdp_param.free_storage = free


def measure_rank(config: dict[str, Any], spec: RunSpec, *, device: str, tracked_steps: int,
                 seed: int) -> dict[str, Any]:
    """This rank's peak over ``tracked_steps`` sharded steps."""
    from memfit.estimate.shape import language_config

    config = language_config(config)
    vocab = int(config["vocab_size"])
    torch.manual_seed(seed)  # every rank builds the same weights (FSDP2 shards them, DDP checks they agree)
    model = build_model(config, spec.with_(sharding="none", gpus=1, nodes=1, reshard_after_forward=None,
                                           cpu_offload_params=False, cpu_offload_optimizer=False), device=device)
    tracker = LiveTensorTracker(vocab=vocab, device_type="cuda" if device == "cuda" else None)
    with tracker, fsdp_resizes_seen(tracker):
        wrapped = shard_model(model, spec, device)
        tracker.track_model(model)
        step_opt, state_opt = sharded_optimizer(model, spec)
        tracker.track_optimizer(state_opt)
        for _ in range(tracked_steps):
            run_step(wrapped, spec, optimizer=step_opt, batch=spec.batch, seq=spec.seq, vocab=vocab, device=device,
                     tracker=tracker)
    summary = tracker.summary()
    by_category = {str(k): int(summary["by_category"].get(k, 0)) for k in TRACKED_CATEGORIES}
    by_category.pop(str(Category.UNTRACKED), None)
    del wrapped, model, step_opt, state_opt
    gc.collect()
    return {"rank": dist.get_rank(), "peak_bytes": int(summary["peak_bytes"]),
            "peak_phase": str(summary["peak_phase"]), "by_category": by_category,
            "phase_peaks": {k: int(v) for k, v in summary["phase_peaks"].items() if k != "setup"}}


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    req_path, out_path = argv[1], argv[2]
    with open(req_path, encoding="utf-8") as f:
        request = json.load(f)
    device = request["device"]
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    reply: dict[str, Any] = {"ok": True, "results": []}
    try:
        for d in request["specs"]:
            mine = measure_rank(request["config"], RunSpec.from_dict(d), device=device,
                                tracked_steps=int(request["tracked_steps"]), seed=int(request["seed"]))
            ranks: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, mine)
            reply["results"].append({"backend": backend, "ranks": ranks})
    except Exception as exc:  # every rank fails alike; rank 0 reports it
        traceback.print_exc(file=sys.stderr)
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if dist.get_rank() == 0:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(reply, f)
    dist.destroy_process_group()
    return 0 if reply["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
