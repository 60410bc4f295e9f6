"""One rank of an N-rank sharded step, traced in this one process: a fake process group and fake tensors.

As torchtitan's memory estimation does (``scripts/estimate/estimation.py``): ``dist.init_process_group("fake",
store=FakeStore(), rank=r, world_size=N)`` (torch 2.13.0, ``torch.testing._internal.distributed.fake_pg``: every
collective returns at once and moves no data), the device mesh made before the ``FakeTensorMode`` is entered (it
reads its rank table's values), the model wrapped under the fake mode. The wrapping is ``memfit measure``'s own
(:func:`memfit.measure.sharded_worker.shard_model` and ``sharded_optimizer``: FSDP2 ``fully_shard`` per decoder
layer then the root, DDP, DDP + ``ZeroRedundancyOptimizer``), done under the tracker as measure does, so what the
wrapper allocates (DDP's buckets, FSDP2's padded shards) is counted, and a DTensor counts its local shard.

What the fake backend cannot do, and what the trace does instead (torch 2.13.0):

- DDP's constructor checks the parameters' shapes across ranks and broadcasts the module states, reading real
  data: ``init_sync=False`` skips both (they allocate nothing that outlives the constructor);
- DDP's reducer reads the all-reduce's result from the Work's future, which the fake backend leaves empty (an
  internal assert in ``comm.cpp``): :func:`fake_allreduce` is registered as the comm hook; it divides the bucket in
  place and returns it, as the default hook does (``AllReduceCommHook``: ``tensors[0] /= size``), no bytes;
- DDP rebuilds its buckets in the second step's forward after a broadcast of their order that C++ reads: the
  trace runs one step after warming the optimizer (:mod:`memfit.trace.engine`), so it never rebuilds (a rebuild
  reorders the parameters among the buckets; their total is every gradient once either way);
- on CPU, ``memfit measure`` runs gloo, whose reduce-scatter reduces a copy of its whole input, alive until the
  call returns (probed, 2 gloo ranks: an 8,000 B input leaves +8,000 B live until its Work is freed): with
  ``--device cpu`` :func:`gloo_reduce_scatter_copies` allocates that copy around every reduce-scatter; NCCL
  (``--device cuda``) reduces in place and makes none. gloo's all-reduce, all-gather and broadcast copy nothing
  the tracker sees (same probe);
- ZeRO-1 partitions whole tensors, so the ranks differ: rank 0 holds the largest tensor's state (and the
  for-loop optimizer's largest temporaries), :func:`zero1_largest_partition` names the rank with the largest
  partition (ZeroRedundancyOptimizer's own ``_partition_parameters``); the engine traces both, keeps the larger
  (measured tiny Llama over 4 ranks: 2,466,140 B on rank 0 with a 319,000 B partition, 2,463,576 B on rank 2
  with 327,700 B).

Measured agreement: RESULTS ``## sharding`` (the trace column): 18 rows, scaled Llama 3.2 (tied) and Pythia
(untied) over 2 and 4 ranks, every mode, within 16 B of the measured largest rank.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec
from memfit.runtime.tracker import LiveTensorTracker

TRACED_SHARDINGS = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
SHARDED_OPTIMIZERS = ("adamw", "sgd", "sgd-momentum")


def check_sharded_trace(spec: RunSpec) -> None:
    """A MemfitError naming the alternative for a sharded spec the trace does not run (what measure runs too)."""
    if spec.sharding == "none":
        return
    if spec.sharding not in TRACED_SHARDINGS:
        raise MemfitError(f"trace --sharding runs {', '.join(TRACED_SHARDINGS)}; got {spec.sharding!r}")
    alt = f"memfit estimate ... --sharding {spec.sharding} --gpus {spec.gpus}"
    if spec.method not in ("full", "lora"):
        raise MemfitError(f"trace --sharding shards a full fine-tune or a LoRA run (--method full, lora), as "
                          f"measure does; a sharded {spec.method} run is modelled by `{alt}`")
    if spec.optimizer not in SHARDED_OPTIMIZERS:
        raise MemfitError(f"trace --sharding steps torch's own optimizers ({', '.join(SHARDED_OPTIMIZERS)}); "
                          f"--optimizer {spec.optimizer} sharded is modelled by `{alt}`")
    if spec.cpu_offload_params or spec.cpu_offload_optimizer:
        raise MemfitError(f"trace --sharding does not run --offload-params / --offload-optimizer; `{alt} "
                          "--offload-...` models them")
    if spec.grad_accum != 1:
        raise MemfitError(f"trace --sharding runs one micro-batch per step: drop --grad-accum, or use `{alt}`")
    if spec.prefetch != 1:
        raise MemfitError(f"trace --sharding runs FSDP2's own prefetch (1 layer ahead); --prefetch {spec.prefetch} "
                          f"is modelled by `{alt} --prefetch {spec.prefetch}`")
    if spec.offload or spec.offload_activations:
        raise MemfitError(f"trace --sharding does not run --offload / --offload-activations (host copies); `{alt}` "
                          "models them")


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int) -> Iterator[None]:
    """torch's fake backend as the default process group of ``world_size`` ranks, this process being ``rank``."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise MemfitError("trace --sharding makes its own fake process group; this process already has one "
                          "(torch.distributed is initialised): trace from a fresh process")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def fake_allreduce(state, bucket):  # type: ignore[no-untyped-def]
    """DDP comm hook for the fake backend: the default hook's in-place division, the bucket as the result.
    Unannotated on purpose: DDP's ``_check_comm_hook`` compares the annotations with the classes themselves, and
    this module's postponed annotations are strings."""
    buf = bucket.buffer()
    buf.div_(dist.get_world_size())
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


@contextlib.contextmanager
def gloo_reduce_scatter_copies() -> Iterator[None]:
    """Each reduce-scatter allocates a copy of its input for the length of the call, as gloo's does (module
    docstring). FSDP2 (torch 2.13.0 ``_fsdp_collectives.DefaultReduceScatter``) calls
    ``dist.reduce_scatter_single`` by attribute, so replacing the attribute reaches it."""
    original = dist.reduce_scatter_single

    def with_copy(output: torch.Tensor, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        copy = torch.empty_like(input)
        try:
            return original(output, input, *args, **kwargs)
        finally:
            del copy

    dist.reduce_scatter_single = with_copy
    try:
        yield
    finally:
        dist.reduce_scatter_single = original


def sharded_fake_model(config: dict[str, Any], spec: RunSpec, mode: Any, mesh: Any) -> torch.nn.Module:
    """The model for ``spec`` on fake tensors, FSDP2-sharded the way a large model is (torchtitan's meta init):
    built on the meta device, ``fully_shard``-ed there (no fake mode: the mesh is real), then ``to_empty`` under
    the fake mode, which gives each rank's shard a fake storage (FSDP2's ``_apply`` resets its sharded parameters;
    DTensor parameters are swapped in place, so a tied embedding stays tied). No full weight is ever made: a first
    version sharded the whole fake model under the tracker, which saw the full weights through FSDP2's chunk views
    and peaked at set-up (Llama-3.1-70B over 8: 173,145,680,384 B, more than the whole bf16 model, against
    83,877,504,512 B in the step). DDP / ZeRO-1 keep the full replica: :func:`memfit.runtime.build.fake_model`.
    """
    from memfit.measure.sharded_worker import shard_model
    from memfit.runtime.build import build_meta_model

    plain = spec.with_(sharding="none", gpus=1, nodes=1, reshard_after_forward=None)
    model = build_meta_model(config, plain)
    shard_model(model, spec, "cpu", mesh=mesh)
    converter = mode.fake_tensor_converter
    strict, mode.allow_non_fake_inputs = mode.allow_non_fake_inputs, True  # empty_like of a meta tensor: a fake
    try:
        with mode:
            model.to_empty(device="cpu")
    finally:
        mode.allow_non_fake_inputs = strict
    for module in model.modules():  # tensors kept as plain attributes (a rotary embedding's original_inv_freq)
        for key, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not key.startswith("_") and value.device.type == "meta":
                setattr(module, key, converter.from_meta_and_device(mode, value.detach(), torch.device("cpu")))
    return model


def wrap_for_trace(model: torch.nn.Module, spec: RunSpec,
                   tracker: LiveTensorTracker) -> tuple[torch.nn.Module, Any, Any]:
    """DDP / ZeRO-1 around ``model``, under the active fake mode and ``tracker`` (entered by the caller), so the
    buckets DDP allocates are counted; an FSDP2 model (:func:`sharded_fake_model`) is already wrapped. Returns
    (what the step calls, the optimizer the step steps, the one holding the state)."""
    from memfit.measure.sharded_worker import shard_model, sharded_optimizer

    wrapped = model
    if spec.sharding in ("ddp", "zero1"):
        wrapped = shard_model(model, spec, "cpu", init_sync=False)
        wrapped.register_comm_hook(None, fake_allreduce)
    tracker.track_model(model)
    step_opt, state_opt = sharded_optimizer(model, spec)
    return wrapped, step_opt, state_opt


def make_mesh(spec: RunSpec) -> Any:
    """FSDP2's mesh, made now (outside the fake mode); None for DDP / ZeRO-1."""
    if spec.sharding in ("ddp", "zero1"):
        return None
    from memfit.measure.sharded_worker import sharding_mesh

    return sharding_mesh(spec, "cpu")


def zero1_largest_partition(optimizer: Any) -> int:
    """The rank whose ZeroRedundancyOptimizer partition holds the most parameter bytes (its state scales with
    them); the lowest such rank on a tie. Every rank computes the same partition."""
    partitions = optimizer._partition_parameters()  # torch 2.13.0: per rank, a list of param groups
    sizes = [sum(p.numel() * p.element_size() for group in groups for p in group["params"]) for groups in partitions]
    return max(range(len(sizes)), key=lambda r: (sizes[r], -r))
