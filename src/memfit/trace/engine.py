"""Trace one training step of the real model on fake tensors: exact accounting, no memory used.

Procedure (:func:`trace_step`), the same as ``memfit measure`` with the tensors swapped for fakes:

1. build the model with the runtime's builder under ``torch.device("meta")``, swap its weights for
   ``FakeTensor``s (:func:`memfit.runtime.build.fake_model`), build the optimizer as measure does;
2. let the optimizer create its state (one untracked ``step()`` on zero gradients): torch optimizers
   allocate state lazily in their first step, and measure takes its peak over two steps, the second
   running with the state alive from the start;
3. under ``FakeTensorMode``, run one Trainer-like step with the runtime's
   :func:`~memfit.runtime.step.run_step` and :class:`~memfit.runtime.tracker.LiveTensorTracker` (for a CUDA
   target the tracker books each storage in 512-byte blocks and skips the optimizer's host-side step
   counters: its ``booked_size`` and ``ignore_storage``);
4. the peak, its phase, and what is alive at it by category and by module come from the tracker; the
   bytes autograd saves for backward per block come from a ``saved_tensors_hooks`` ledger; memory over the
   step (each event's operator, phase, module and bytes by category) from a
   :class:`~memfit.runtime.timeline.TimelineRecorder` on the tracker, downsampled for the JSON, and with
   ``snapshot=True`` every event, as a memory snapshot (:mod:`memfit.runtime.snapshot`).

Why one step with warm state equals the peak over measure's two steps: the steps allocate the same
activations and gradients; the only difference is the optimizer state, which the second step holds
from its start, and which the first step creates during its optimizer phase (never more than the
second holds at the same point). So every point of step 1 is at most the same point of step 2, and the
steady-state step is the maximum. It also halves the time of a trace.

Value-dependent code: transformers reads tensor values in a few places to pick a faster path (whether
``position_ids`` describe packed sequences, whether a padding mask pads anything). A fake tensor has
no values, so transformers' ``is_tracing`` answers "assume the general case". The trace knows its own
inputs, so it answers as the real run would: :func:`memfit.trace.fake.known_inputs` makes the
packed-sequence check say "not packed" (the step passes no ``position_ids``) after running the same
operators, and the padding mask carries padding exactly when ``--padding-mask`` says so, so the general
case is the real one.
Mixture-of-experts layers run transformers' default ``grouped_mm`` experts, whose fake implementation
needs no routing values.

Worked example (fp32 weights, full fine-tune, AdamW, a 2-layer hidden-64 Llama with vocab 256, b=2,
s=64): the trace's peak equals the real CPU step's tracked peak to the byte (a test checks this for
every catalogue architecture), in well under a second.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from memfit.errors import MemfitError
from memfit.estimate.allocator import advise
from memfit.estimate.category import MODEL_STATES, Category
from memfit.estimate.fits import CUDA_CONTEXT_BYTES, reserved_bytes
from memfit.estimate.spec import RunSpec
from memfit.measure.sharded_worker import fsdp_resizes_seen
from memfit.runtime.allocations import step_allocations
from memfit.runtime.build import fake_model
from memfit.runtime.offload import HostCopies, counting_host
from memfit.runtime.scopes import ModuleScopes, SavedTensorLedger, layer_index
from memfit.runtime.snapshot import memory_snapshot
from memfit.runtime.step import make_optimizer, make_scaler, run_step
from memfit.runtime.timeline import TimelineRecorder
from memfit.runtime.tracker import TRACKED_CATEGORIES, LiveTensorTracker, optimizer_state_tensors
from memfit.timeline import downsample
from memfit.trace.cuda import (
    CudaAutocastFloat32,
    CudaDropout,
    cuda_attention,
    host_storages,
    round_cuda,
)
from memfit.trace.fake import known_inputs, warm_optimizer
from memfit.trace.result import ModuleBytes, TraceResult
from memfit.trace.sharded import (
    check_sharded_trace,
    fake_process_group,
    gloo_reduce_scatter_copies,
    make_mesh,
    sharded_fake_model,
    wrap_for_trace,
    zero1_largest_partition,
)

Progress = Callable[[str], None]


def check_trace_spec(spec: RunSpec) -> None:
    """Raise a MemfitError for settings trace cannot run on fake tensors, naming what to do instead."""
    if spec.loss == "chunked":
        raise MemfitError("trace runs transformers' standard loss or TRL's (--loss trl); drop --loss chunked "
                          "(`memfit estimate` models the chunked loss)")
    if spec.precision == "mixed-fp16":
        raise MemfitError("trace supports fp32, bf16, fp16 and mixed-bf16; mixed-fp16 needs GradScaler's "
                          "value checks (inf/nan) that fake tensors cannot answer: use mixed-bf16")
    if spec.method == "qlora" and spec.use_dora:
        # PEFT 0.21.2's DoRA weight norm dequantises the base weight (dequantize_module_weight, which looks for a
        # bitsandbytes Params4bit): the trace's fake 4-bit weight is not one, so the norm adds the packed
        # (out*in/2, 1) bytes to B@A and fails on its shape
        raise MemfitError("trace does not run QLoRA with --dora yet (PEFT's weight norm dequantises the 4-bit "
                          "weight, which the fake tensors do not reproduce): `memfit measure` runs it on CPU and "
                          "`memfit estimate` models it")


def check_trace_config(config: dict[str, Any], spec: RunSpec) -> None:
    """The config passes the estimate's boundary (:func:`memfit.estimate.shape.validate_config`, and every
    ``--modules-to-save`` name must match a module), before any model is built. MoE models outside bf16:
    transformers then routes tokens to experts with its eager loop, whose ``nonzero`` has a data-dependent
    shape that fake tensors cannot give (bf16 uses grouped_mm, traceable)."""
    from memfit.estimate.arch import REGISTRY, experts_run_eager_loop
    from memfit.estimate.lora import check_modules_to_save
    from memfit.estimate.shape import ModelShape, validate_config

    validate_config(config)
    if spec.is_adapter and spec.modules_to_save and REGISTRY.get(str(config.get("model_type"))) is not None:
        try:
            shape = ModelShape.from_hf_config(config)
        except MemfitError:  # valid, but lacks a size the estimate needs: checked on the real model instead
            shape = None
        if shape is not None:  # other architectures: checked on the real model (memfit.runtime.build)
            check_modules_to_save(shape, spec)
    if experts_run_eager_loop(config, spec.precision):
        raise MemfitError(f"trace of a mixture-of-experts model needs --precision bf16 (with "
                          f"{spec.precision} transformers routes tokens with a data-dependent loop fake tensors "
                          "cannot run); `memfit estimate` and `memfit measure` take any precision")


def trace_step(config: dict[str, Any], spec: RunSpec, *, name: str | None = None,
               progress: Progress | None = None, snapshot: bool = False, rank: int | None = None) -> TraceResult:
    """Trace the steady-state training step of ``config`` under ``spec`` on fake tensors (module docstring).

    ``spec.device`` chooses the prediction: ``"cpu"`` is what a CPU step's live tensors hold; ``"cuda"``
    corrects the CPU kernels to the CUDA ones (:mod:`memfit.trace.cuda`). ``snapshot=True`` also builds the
    memory snapshot (``TraceResult.snapshot``, not part of the JSON). With ``spec.sharding`` other than
    ``"none"``, one rank of ``spec.gpus`` on a fake process group (:mod:`memfit.trace.sharded`): ``rank``, or
    the busiest: rank 0 under FSDP2 and DDP, whose ranks hold the same bytes; under ZeRO-1 the larger peak of
    rank 0 and the rank with the largest partition.
    """
    from memfit.estimate.shape import language_config

    config = language_config(config)  # a multimodal config: its text model, the one the estimate reads
    check_trace_spec(spec)
    check_sharded_trace(spec)
    check_trace_config(config, spec)
    vocab = int(config.get("vocab_size") or 0)
    if vocab < 1:
        raise MemfitError("the config has no vocab_size: add it to config.json")
    say = progress or (lambda _msg: None)
    if spec.sharding == "none":
        return _trace(config, spec, vocab, say, name=name, snapshot=snapshot, rank=None)
    result = _trace(config, spec, vocab, say, name=name, snapshot=snapshot, rank=rank or 0)
    other = result.largest_partition_rank
    if rank is None and other is not None and other != result.rank:
        # ZeRO-1: rank 0 holds the largest tensor's state (and the optimizer's largest temporaries), another rank
        # may hold the largest partition: both traced, the larger peak kept (what must fit one GPU)
        second = _trace(config, spec, vocab, say, name=name, snapshot=snapshot, rank=other)
        result = max(result, second, key=lambda r: r.peak_bytes)
    return result


def _trace(config: dict[str, Any], spec: RunSpec, vocab: int, say: Progress, *, name: str | None,
           snapshot: bool, rank: int | None) -> TraceResult:
    with contextlib.ExitStack() as group:
        mesh = None
        if rank is not None:
            group.enter_context(fake_process_group(spec.gpus, rank))
            mesh = make_mesh(spec)  # before the fake mode: the mesh reads its rank table's values
        return _trace_in(config, spec, vocab, say, name=name, snapshot=snapshot, rank=rank, mesh=mesh)


def _trace_in(config: dict[str, Any], spec: RunSpec, vocab: int, say: Progress, *, name: str | None,
              snapshot: bool, rank: int | None, mesh: Any) -> TraceResult:
    is_cuda = spec.device == "cuda"
    sharded = rank is not None
    build_spec = spec.with_(attention="sdpa", device="cpu") if spec.attention == "flash" else spec.with_(
        device="cpu")
    t0 = time.perf_counter()
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    say("building the model on fake tensors")
    plain = build_spec.with_(sharding="none", gpus=1, nodes=1, reshard_after_forward=None) if sharded else build_spec
    fsdp = sharded and spec.sharding not in ("ddp", "zero1")
    model = sharded_fake_model(config, build_spec, mode, mesh) if fsdp else fake_model(config, plain, mode,
                                                                                        device="cpu")
    host: set[int] = set()
    offloaded = HostCopies(device_copy_on_unpack=is_cuda)  # --offload's host copies, booked apart

    def on_host(storage: Any) -> bool:
        return offloaded.claims(storage) or id(storage) in host

    tracker = LiveTensorTracker(vocab=vocab, booked_size=round_cuda if is_cuda else None, ignore_storage=on_host)
    step_model: torch.nn.Module = model
    largest = None
    if sharded:  # wrapped under the tracker, as measure wraps: what the wrapper allocates is counted
        say("sharding the model and creating the optimizer state")
        with mode, tracker, fsdp_resizes_seen(tracker), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step_model, optimizer, state_optimizer = wrap_for_trace(model, build_spec, tracker)
        if spec.sharding == "zero1":
            largest = zero1_largest_partition(optimizer)
    else:
        # a paged optimizer runs its non-paged twin on the fake tensors; its states, in CUDA unified memory, are
        # not booked as device memory (the estimate reports them apart)
        optimizer = state_optimizer = make_optimizer(model, spec, paged=False)
        say("creating the optimizer state")
    scaler = make_scaler(build_spec, "cpu")
    warm_optimizer(model, optimizer, mode)
    build_seconds = time.perf_counter() - t0

    if is_cuda:
        host |= host_storages(state_optimizer)
    if spec.is_paged:
        host |= {id(t.untyped_storage()) for t in optimizer_state_tensors(optimizer)}
    if not sharded:
        tracker.track_model(model)
    tracker.track_optimizer(state_optimizer)
    optimizer_for_states = state_optimizer
    scopes = ModuleScopes(model, tracker)
    ledger = SavedTensorLedger.for_model(model, scopes)
    recorder = TimelineRecorder(tracker, model=model, keep_events=snapshot or is_cuda)
    t1 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(mode)
        stack.enter_context(known_inputs())
        if is_cuda:
            stack.enter_context(cuda_attention())
            stack.enter_context(CudaDropout())
            if spec.is_mixed:
                stack.enter_context(CudaAutocastFloat32())
        stack.enter_context(counting_host(offloaded))
        stack.enter_context(tracker)
        if sharded:
            stack.enter_context(fsdp_resizes_seen(tracker))
            if not is_cuda:  # measure on CPU runs gloo (memfit.trace.sharded)
                stack.enter_context(gloo_reduce_scatter_copies())
        stack.enter_context(scopes)
        say("tracing one step: forward, backward, optimizer")
        with ledger:
            run_step(step_model, build_spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab,
                     device="cpu", tracker=tracker, scaler=scaler)
        recorder.close()
    step_seconds = time.perf_counter() - t1
    result = _result(config, spec, model, optimizer_for_states, tracker, ledger, name=name,
                     build_seconds=build_seconds, step_seconds=step_seconds)
    if sharded:
        result = replace(result, rank=rank, largest_partition_rank=largest)
    memory = memory_snapshot(recorder.initial, recorder.events, recorder.final) if snapshot else None
    if is_cuda:  # the reserved peak: the step's allocations replayed through the caching allocator
        allocator = advise(step_allocations(recorder.initial, recorder.events), spec.allocator_settings)
        result = replace(result, allocator=allocator.to_dict(),
                         reserved_bytes=allocator.default.reserved_peak_bytes + CUDA_CONTEXT_BYTES)
    return replace(result, timeline=tuple(downsample(recorder.points)), snapshot=memory,
                   host_bytes=offloaded.peak_bytes)


def _result(config: dict[str, Any], spec: RunSpec, model: torch.nn.Module, optimizer: Any,
            tracker: LiveTensorTracker, ledger: SavedTensorLedger, *,
            name: str | None, build_seconds: float, step_seconds: float) -> TraceResult:
    summary = tracker.summary()
    components = {k: int(summary["by_category"].get(k, 0)) for k in TRACKED_CATEGORIES}
    modules: dict[str, dict[Category, int]] = defaultdict(lambda: defaultdict(int))
    for nbytes, category, tag in tracker.peak_storages():
        if category in MODEL_STATES:
            continue  # model states are listed by category; the module table is for activations
        modules[tag or "(untagged)"][category] += nbytes
    per_module = tuple(sorted(
        (ModuleBytes(module=m, by_category=dict(c)) for m, c in modules.items()),
        key=lambda r: -r.bytes))
    per_layer: dict[int, int] = defaultdict(int)
    for row in per_module:
        i = layer_index(row.module)
        if i is not None:
            per_layer[i] += row.bytes
    model_states = _model_states(model, optimizer, tracker)
    return TraceResult(
        spec=spec, model=name or str(config.get("model_type", "model")), peak_bytes=int(summary["peak_bytes"]),
        peak_phase=str(summary["peak_phase"]), components=components, model_states=model_states,
        phase_peaks={k: int(v) for k, v in summary["phase_peaks"].items() if k != "setup"},
        per_module=per_module, per_layer_peak=dict(sorted(per_layer.items())),
        saved_by_module=dict(sorted(ledger.by_module.items())), saved_by_layer=ledger.by_layer(),
        build_seconds=build_seconds, step_seconds=step_seconds,
        # what the device reserves around the traced peak: on CUDA trace_step replaces it with the allocator
        # replay; the stated assumptions stay where there is no replay
        reserved_bytes=reserved_bytes(int(summary["peak_bytes"]), spec.device),
    )


def _model_states(model: torch.nn.Module, optimizer: Any, tracker: LiveTensorTracker) -> dict[Category, int]:
    """Full sizes of weights (frozen/trainable; buffers count as frozen, as in ``components``), gradients
    and optimizer state, whatever the phase, as the tracker books them.

    Gradients are one per trainable parameter, the parameter's size (autograd accumulates into a tensor
    shaped and typed like the parameter); optimizer state is what the optimizer holds after its step.
    """
    frozen = trainable = 0
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = tracker.booked_bytes(p)
        if p.requires_grad:
            trainable += n
        else:
            frozen += n
    for b in model.buffers():
        if id(b) not in seen:
            seen.add(id(b))
            frozen += tracker.booked_bytes(b)
    opt = sum(tracker.booked_bytes(t) for t in optimizer_state_tensors(optimizer))
    return {Category.WEIGHTS_FROZEN: frozen, Category.WEIGHTS_TRAINABLE: trainable, Category.GRADIENTS: trainable,
            Category.OPTIMIZER: opt}
