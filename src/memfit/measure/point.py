"""Measure one point (model, spec, batch, seq) in this process: peak by category, per-phase peaks, time.

Procedure (what ``memfit measure`` runs in a fresh subprocess per point, and what ``bench/agreement.py``
calls directly):

1. build the model and optimizer from the config (random weights);
2. ``tracked_steps`` steps (default 2) under :class:`LiveTensorTracker`: the first allocates the optimizer
   state lazily, the second is a steady-state step; the peak is over both;
3. ``warmup`` + ``steps`` steps without the tracker; the median of the ``steps`` timed ones is the step time.

Memory over the tracked steps (each event's operator, phase, module path and bytes alive by category) is
recorded by a :class:`~memfit.runtime.timeline.TimelineRecorder` (modules named by
:class:`~memfit.runtime.scopes.ModuleScopes`) and kept downsampled in ``timeline``. With ``snapshot_to`` every
event is kept and written there as a memory snapshot pickle (:mod:`memfit.runtime.snapshot`); on CUDA,
``cuda_snapshot_to`` also gets the allocator's own snapshot of the tracked steps
(``torch.cuda.memory._record_memory_history`` then ``_snapshot()``, torch 2.13.0), pickled the same way.

On CUDA ``peak_bytes`` is ``torch.cuda.max_memory_allocated`` and ``reserved_bytes`` is
``max_memory_reserved`` (statistics reset before the model is built, minus whatever was allocated
before, which is nothing in a fresh worker process; the tracker runs too, counting CUDA storages, for the
categories, and whatever the allocator holds that no tensor output accounts for, e.g. cuBLAS workspaces,
shows as ``untracked``). On CPU ``peak_bytes`` is the tracker's peak and ``reserved_bytes`` is None.

Out of memory is a result, not an error: ``fits=False`` with the message, on CUDA a real
``torch.OutOfMemoryError``, on CPU a :class:`SimulatedOutOfMemoryError` when ``memory_limit`` is set.
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import torch

from memfit.errors import MemfitError
from memfit.estimate.category import Category
from memfit.estimate.spec import RunSpec
from memfit.files import write_atomic
from memfit.measure.result import PointResult
from memfit.runtime.build import build_model
from memfit.runtime.offload import HostCopies, counting_host
from memfit.runtime.scopes import ModuleScopes
from memfit.runtime.snapshot import SNAPSHOT_PICKLE_PROTOCOL, memory_snapshot, write_snapshot
from memfit.runtime.step import make_optimizer, make_scaler, median_seconds, run_step, time_steps
from memfit.runtime.timeline import TimelineRecorder
from memfit.runtime.tracker import TRACKED_CATEGORIES, LiveTensorTracker, SimulatedOutOfMemoryError
from memfit.timeline import downsample

__all__ = ["PointResult", "measure_point"]

CUDA_HISTORY_ENTRIES = 1_000_000  # allocator trace entries kept for --snapshot on CUDA (torch's default is 100,000)
_CUDA_OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)  # torch.OutOfMemoryError: 2.5+


def measure_point(config: dict[str, Any], spec: RunSpec, *, device: str = "cpu", steps: int = 3,
                  warmup: int = 1, tracked_steps: int = 2, memory_limit: int | None = None,
                  seed: int = 0, snapshot_to: str | None = None,
                  cuda_snapshot_to: str | None = None) -> PointResult:
    """Measure ``spec`` (its batch, seq, checkpointing) on ``device``; see the module docstring."""
    if device == "cuda" and not torch.cuda.is_available():
        raise MemfitError("--device cuda but torch sees no CUDA GPU: use --device cpu")
    from memfit.estimate.shape import language_config

    config = language_config(config)  # a multimodal config: its text model, the one the estimate reads
    vocab = int(config.get("vocab_size") or 0)
    if vocab < 1:
        raise MemfitError("the config has no vocab_size: add it to config.json")
    torch.manual_seed(seed)
    is_cuda = device.startswith("cuda")
    common = {"batch": spec.batch, "seq": spec.seq, "checkpointing": spec.checkpointing, "device": device}
    base_allocated = 0
    if is_cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base_allocated = int(torch.cuda.memory_allocated())
        if memory_limit is not None:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, (memory_limit + base_allocated) / total))
    host = HostCopies()  # --offload's host copies: booked apart from the device (memfit.runtime.offload)
    tracker = LiveTensorTracker(vocab=vocab, memory_limit=None if is_cuda else memory_limit,
                                device_type="cuda" if is_cuda else None, ignore_storage=host.claims)
    model = optimizer = None
    recorder: TimelineRecorder | None = None
    try:
        model = build_model(config, spec, device=device)
        optimizer = make_optimizer(model, spec)
        scaler = make_scaler(spec, device)
        tracker.track_model(model)
        tracker.track_optimizer(optimizer)
        recorder = TimelineRecorder(tracker, model=model, keep_events=snapshot_to is not None)
        record_cuda = is_cuda and cuda_snapshot_to is not None
        if record_cuda:
            torch.cuda.memory._record_memory_history("all", context="all", stacks="python",
                                                     max_entries=CUDA_HISTORY_ENTRIES, clear_history=True)
        losses = []
        with counting_host(host), tracker, ModuleScopes(model, tracker):
            for _ in range(tracked_steps):
                r = run_step(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab,
                             device=device, tracker=tracker, scaler=scaler)
                losses.append(r.loss)
        recorder.close()
        if record_cuda:
            real = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            write_atomic(str(cuda_snapshot_to), pickle.dumps(real, protocol=SNAPSHOT_PICKLE_PROTOCOL), force=True,
                         flag="--snapshot")
        if snapshot_to is not None:
            write_snapshot(snapshot_to, memory_snapshot(recorder.initial, recorder.events, recorder.final), force=True)
        times = time_steps(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab,
                           device=device, steps=steps, warmup=warmup, scaler=scaler)
    except (SimulatedOutOfMemoryError, _CUDA_OOM) as exc:
        _stop_cuda_history(is_cuda and cuda_snapshot_to is not None)
        return PointResult(**common, fits=False, error=_oom_message(exc, spec))
    except RuntimeError as exc:  # OOM raised inside the autograd engine can arrive re-wrapped
        _stop_cuda_history(is_cuda and cuda_snapshot_to is not None)
        if "out of memory" not in str(exc).lower():
            raise
        return PointResult(**common, fits=False, error=_oom_message(exc, spec))
    finally:
        del model, optimizer
        gc.collect()
        if is_cuda:
            if memory_limit is not None:
                torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
    summary = tracker.summary()
    by_category = {k: int(summary["by_category"].get(k, 0)) for k in TRACKED_CATEGORIES}
    tracker_peak = int(summary["peak_bytes"])
    reserved = None
    peak = tracker_peak
    if is_cuda:
        peak = int(torch.cuda.max_memory_allocated()) - base_allocated
        reserved = int(torch.cuda.max_memory_reserved())
        by_category[Category.UNTRACKED] = max(0, peak - tracker_peak)
    seconds = median_seconds(times)
    return PointResult(
        **common, fits=True, peak_bytes=peak, reserved_bytes=reserved, tracker_peak_bytes=tracker_peak,
        peak_phase=str(summary["peak_phase"]), by_category=by_category,
        phase_peaks={k: int(v) for k, v in summary["phase_peaks"].items() if k != "setup"},
        step_seconds=seconds, step_times=tuple(times),
        tokens_per_second=(spec.batch * spec.seq / seconds) if seconds > 0 else None,
        loss=losses[-1] if losses else None,
        timeline=tuple(downsample(recorder.points)) if recorder is not None else (), host_bytes=host.peak_bytes,
    )


def _stop_cuda_history(recording: bool) -> None:
    if recording:
        torch.cuda.memory._record_memory_history(enabled=None)


def _oom_message(exc: BaseException, spec: RunSpec) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"does not fit at batch {spec.batch}, seq {spec.seq}: {first[:200]}"
