"""Sweeps over batch, sequence length and checkpointing, each point in a fresh subprocess
(:mod:`memfit.measure.isolation`); what the points say together (:mod:`memfit.measure.regression`: peak
against batch, the checkpointing trade) and the largest micro-batch that fits (:mod:`memfit.measure.bisect`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.files import temporary_beside
from memfit.measure.bisect import bisect_max_batch, estimate_peak, estimated_max_batch
from memfit.measure.isolation import measure_in_subprocess
from memfit.measure.regression import CheckpointingTrade, PeakVsBatch, checkpointing_trades, peak_vs_batch
from memfit.measure.result import PointResult


@dataclass(frozen=True, kw_only=True, slots=True)
class MaxBatchResult:
    """The largest micro-batch that fits ``limit_bytes`` at ``seq``, found by bisection."""

    seq: int
    checkpointing: str
    limit_bytes: int
    estimate_start: int | None
    max_batch: int
    probes: tuple[PointResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "checkpointing": self.checkpointing, "limit_bytes": self.limit_bytes,
                "estimate_start": self.estimate_start, "max_batch": self.max_batch,
                "probes": [{"batch": p.batch, "fits": p.fits, "peak_bytes": p.peak_bytes}
                           for p in self.probes]}


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepResult:
    """Every measured point, the peak-vs-batch lines, the checkpointing trades and (optionally) the max batch."""

    model: str
    spec: RunSpec
    device: str
    runs: tuple[PointResult, ...]
    peak_vs_batch: tuple[PeakVsBatch, ...] = ()
    trades: tuple[CheckpointingTrade, ...] = ()
    max_batch: MaxBatchResult | None = None
    memory_limit: int | None = None
    snapshot: SnapshotFiles | None = None  # --snapshot: the files written, for the run timeline_run names

    @property
    def timeline_run(self) -> int | None:
        """The run whose memory over the step the JSON carries: the highest peak among those that fit and
        recorded one (the first of equals)."""
        return highest_run(self.runs)

    @property
    def headline(self) -> PeakVsBatch | None:
        """The line to quote: without checkpointing if measured, the longest sequence."""
        if not self.peak_vs_batch:
            return None
        return sorted(self.peak_vs_batch, key=lambda f: (f.checkpointing != "none", -f.seq))[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "device": self.device, "spec": self.spec.to_dict(),
            "memory_limit": self.memory_limit,
            "runs": [r.to_dict(timeline=False) for r in self.runs],
            **self._timeline(),
            "peak_vs_batch_headline": self.headline.to_dict() if self.headline else None,
            "peak_vs_batch": [f.to_dict() for f in self.peak_vs_batch],
            "checkpointing_trade": [t.to_dict() for t in self.trades],
            "max_batch": self.max_batch.to_dict() if self.max_batch else None,
        }


    def _timeline(self) -> dict[str, Any]:
        i = self.timeline_run
        if i is None:
            return {}
        r = self.runs[i]
        return {"timeline_run": {"index": i, "batch": r.batch, "seq": r.seq, "checkpointing": r.checkpointing},
                "timeline": [p.to_dict() for p in r.timeline]}


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotFiles:
    """``--snapshot``: memfit's memory snapshot of the highest-peak run, and on CUDA the allocator's own."""

    memfit: Path
    cuda: Path | None = None


def cuda_snapshot_path(path: Path) -> Path:
    """Where ``measure --snapshot FILE`` puts the allocator's real snapshot on CUDA: ``FILE``'s stem + ``.cuda``.

    >>> str(cuda_snapshot_path(Path("out/step.pickle")))
    'out/step.cuda.pickle'
    """
    return path.with_name(f"{path.stem}.cuda{path.suffix or '.pickle'}")


def highest_run(runs: Sequence[PointResult]) -> int | None:
    """The index of the highest measured peak among the runs that fit and recorded a timeline (the first of
    equals), or None."""
    candidates = [(r.peak_bytes or 0, -i) for i, r in enumerate(runs) if r.fits and r.timeline]
    return -max(candidates)[1] if candidates else None


def sweep_specs(spec: RunSpec, *, batches: list[int], seqs: list[int], checkpointing: list[str]) -> list[RunSpec]:
    """The points of a sweep in run order: checkpointing mode, then seq, then batch."""
    return [spec.with_(batch=b, seq=s, checkpointing=c) for c in checkpointing for s in seqs for b in batches]


def run_sweep(config: dict[str, Any], spec: RunSpec, *, model: str, batches: list[int], seqs: list[int],
              checkpointing: list[str], device: str, steps: int = 3, memory_limit: int | None = None,
              max_batch: bool = False, isolate: bool = True, trainer: str | None = None,
              on_point: Callable[[RunSpec, PointResult | None], None] | None = None,
              snapshot: Path | None = None, force: bool = False) -> SweepResult:
    """Measure every (checkpointing, seq, batch) point, then draw the lines, pair the trades and (optionally)
    bisect the max batch.

    ``isolate=False`` measures in this process (for tests); ``trainer`` ``"hf"`` / ``"trl"`` runs each point
    through the real Trainer / SFTTrainer (:mod:`memfit.measure.trainer`); ``on_point(spec, result)`` is called
    before (result None) and after each point, for a progress bar. ``snapshot`` (memfit's own loop only): each
    point of the sweep writes its memory snapshot to a temporary file beside it; the one of
    :attr:`SweepResult.timeline_run` becomes ``snapshot`` (and on CUDA, :func:`cuda_snapshot_path` gets the
    allocator's own), the others are removed.
    """
    shape = ModelShape.from_hf_config(config)
    pending: dict[int, tuple[Path, Path | None]] = {}  # run index -> its temporary snapshot files

    def measure(s: RunSpec) -> PointResult:
        if on_point:
            on_point(s, None)
        snap = cuda_snap = None
        if snapshot is not None and len(runs) < n_points:  # the sweep's points, not max-batch probes
            snap = temporary_beside(snapshot)
            cuda_snap = temporary_beside(cuda_snapshot_path(snapshot)) if device == "cuda" else None
            pending[len(runs)] = (snap, cuda_snap)
        snap_to = None if snap is None else str(snap)
        cuda_to = None if cuda_snap is None else str(cuda_snap)
        if isolate:
            r = measure_in_subprocess(config, s, device=device, steps=steps, memory_limit=memory_limit,
                                      snapshot_to=snap_to, cuda_snapshot_to=cuda_to, trainer=trainer)
        elif trainer is not None:
            from memfit.measure.trainer import measure_point_trainer

            r = measure_point_trainer(config, s, trainer=trainer, device=device, steps=steps)
        else:
            from memfit.measure.point import measure_point

            r = measure_point(config, s, device=device, steps=steps, memory_limit=memory_limit,
                              snapshot_to=snap_to, cuda_snapshot_to=cuda_to)
        if r.estimate_bytes is None:  # --trainer trl brings its own (TRL's fused LM head)
            r = r.with_estimate(estimate_peak(config, s.with_(device="cuda" if device == "cuda" else "cpu")))
        if on_point:
            on_point(s, r)
        return r

    specs = sweep_specs(spec, batches=batches, seqs=seqs, checkpointing=checkpointing)
    n_points = len(specs)
    runs: list[PointResult] = []
    try:
        for s in specs:
            runs.append(measure(s))
        files = _keep_snapshot(snapshot, pending, runs, force) if snapshot is not None else None
    finally:
        for temporary in pending.values():
            for f in temporary:
                if f is not None:
                    f.unlink(missing_ok=True)
    best: MaxBatchResult | None = None
    if max_batch:
        limit = memory_limit if memory_limit is not None else _device_total(device)
        if limit is None:
            raise MemfitError("--max-batch on CPU needs --memory-limit (a simulated device size, e.g. 2GiB)")
        base = spec.with_(seq=max(seqs), checkpointing=checkpointing[-1])
        start = estimated_max_batch(config, base, limit)
        known = {r.batch: r for r in runs if r.seq == base.seq and r.checkpointing == base.checkpointing}
        found, probes = bisect_max_batch(measure, base, start=start or 1, known=known)
        best = MaxBatchResult(seq=base.seq, checkpointing=base.checkpointing, limit_bytes=limit,
                              estimate_start=start, max_batch=found, probes=tuple(probes))
    return SweepResult(model=model, spec=spec, device=device, runs=tuple(runs),
                       peak_vs_batch=tuple(peak_vs_batch(runs, shape)), trades=tuple(checkpointing_trades(runs)),
                       max_batch=best, memory_limit=memory_limit, snapshot=files)


def _keep_snapshot(target: Path, pending: dict[int, tuple[Path, Path | None]], runs: list[PointResult],
                   force: bool) -> SnapshotFiles | None:
    """Rename the snapshot of the highest-peak run onto ``target`` (checked again: ``--force``)."""
    from memfit.files import move_into_place

    chosen = highest_run(runs)
    if chosen is None or chosen not in pending:
        return None
    snap, cuda_snap = pending[chosen]
    if not snap.exists() or snap.stat().st_size == 0:
        return None
    move_into_place(snap, target, force=force, flag="--snapshot", example="step.pickle")
    cuda_target = None
    if cuda_snap is not None and cuda_snap.exists() and cuda_snap.stat().st_size > 0:
        cuda_target = cuda_snapshot_path(target)
        move_into_place(cuda_snap, cuda_target, force=force, flag="--snapshot", example="step.pickle")
    return SnapshotFiles(memfit=target, cuda=cuda_target)


def _device_total(device: str) -> int | None:
    if device != "cuda":
        return None
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)
