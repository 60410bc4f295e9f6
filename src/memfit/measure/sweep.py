"""Sweeps over batch, sequence length and checkpointing, each point in a fresh subprocess; the linear
fit of peak vs batch, the checkpointing trade, and the largest micro-batch that fits.

The fit (ordinary least squares over the points that fit, one fit per (seq, checkpointing))::

    peak(b) = slope * b + intercept          slope = bytes per sample, intercept = model states + ...
    R^2 = 1 - SS_res / SS_tot
    activation constant c = slope / (L * s * h)   bytes per layer x token x hidden (the lesson's ~20)

Worked example: peaks 10, 14, 22 MB at b = 2, 4, 8 give slope 2 MB, intercept 6 MB, R^2 = 1; with
L = 4, s = 128, h = 256 the constant is 2e6 / 131072 = 15.3 B.

The checkpointing trade, per (batch, seq) measured with and without: saved = peak_none - peak_full,
fraction = saved / peak_none, slowdown = t_full / t_none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.measure.result import PointResult

LESSON_ACTIVATION_CONSTANT = 20.0  # bytes per layer x token x hidden, bf16 (LESSON.txt, "~20 bytes")
WORKER_TIMEOUT_S = 1800

Measure = Callable[[RunSpec], PointResult]


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchFit:
    """Least-squares line of peak bytes against micro-batch, for one (seq, checkpointing)."""

    seq: int
    checkpointing: str
    batches: tuple[int, ...]
    slope_bytes_per_sample: int
    intercept_bytes: int
    r2: float
    bytes_per_layer_token_hidden: float

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "checkpointing": self.checkpointing, "batches": list(self.batches),
                "slope_bytes_per_sample": self.slope_bytes_per_sample, "intercept_bytes": self.intercept_bytes,
                "r2": self.r2, "bytes_per_layer_token_hidden": self.bytes_per_layer_token_hidden,
                "lesson_constant": LESSON_ACTIVATION_CONSTANT}


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointingTrade:
    """One (batch, seq) measured without and with checkpointing."""

    batch: int
    seq: int
    peak_without: int
    peak_with: int
    seconds_without: float
    seconds_with: float

    @property
    def saved_bytes(self) -> int:
        return self.peak_without - self.peak_with

    @property
    def fraction_saved(self) -> float:
        return self.saved_bytes / self.peak_without if self.peak_without else 0.0

    @property
    def slowdown(self) -> float:
        """Time ratio with / without (1.27 = 27% more time per step)."""
        return self.seconds_with / self.seconds_without if self.seconds_without > 0 else float("nan")

    @property
    def verdict(self) -> str:
        """One line. Take it when the share of memory saved is at least the share of time added, or when it
        saves 20% or more for at most 50% more time (the lesson's "20 to 40% slower" is the usual price);
        skip it under 5% saved; otherwise take it only to make a run fit."""
        pct = round(100 * self.fraction_saved)
        extra = round(100 * (self.slowdown - 1))
        more = f"{extra}% more time" if extra >= 0 else f"{-extra}% less time"
        if self.fraction_saved < 0.05:
            return f"saves {pct}% for {more}: skip it, activations are not the cost here"
        if self.fraction_saved >= self.slowdown - 1 or (self.fraction_saved >= 0.2 and self.slowdown <= 1.5):
            return f"saves {pct}% for {more}: take it"
        return f"saves {pct}% for {more}: take it only if the run does not fit without it"

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "seq": self.seq, "peak_without": self.peak_without,
                "peak_with": self.peak_with, "saved_bytes": self.saved_bytes,
                "fraction_saved": self.fraction_saved, "seconds_without": self.seconds_without,
                "seconds_with": self.seconds_with, "slowdown": self.slowdown, "verdict": self.verdict}


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
    """Every measured point, the fits, the checkpointing trades and (optionally) the max batch."""

    model: str
    spec: RunSpec
    device: str
    runs: tuple[PointResult, ...]
    fits: tuple[BatchFit, ...] = ()
    trades: tuple[CheckpointingTrade, ...] = ()
    max_batch: MaxBatchResult | None = None
    memory_limit: int | None = None

    @property
    def fit(self) -> BatchFit | None:
        """The headline fit: without checkpointing if measured, the longest sequence."""
        if not self.fits:
            return None
        return sorted(self.fits, key=lambda f: (f.checkpointing != "none", -f.seq))[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "device": self.device, "spec": self.spec.to_dict(),
            "memory_limit": self.memory_limit,
            "runs": [r.to_dict() for r in self.runs],
            "fit": self.fit.to_dict() if self.fit else None,
            "fits": [f.to_dict() for f in self.fits],
            "checkpointing_trade": [t.to_dict() for t in self.trades],
            "max_batch": self.max_batch.to_dict() if self.max_batch else None,
        }


# ---- pure computations -------------------------------------------------------------------------

def linear_fit(xs: list[int], ys: list[int]) -> tuple[float, float, float]:
    """Ordinary least squares: ``(slope, intercept, r2)``; r2 = 1.0 when y does not vary.

    >>> linear_fit([2, 4, 8], [10, 14, 22])
    (2.0, 6.0, 1.0)
    """
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise MemfitError("a fit of peak vs batch needs at least two different batch sizes that fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 if ss_tot == 0 else 1.0 - ss_res / ss_tot
    return slope, intercept, r2


def batch_fits(runs: list[PointResult] | tuple[PointResult, ...], shape: ModelShape) -> list[BatchFit]:
    """One :class:`BatchFit` per (seq, checkpointing) with two or more batch sizes that fit."""
    groups: dict[tuple[int, str], list[PointResult]] = {}
    for r in runs:
        if r.fits and r.peak_bytes is not None:
            groups.setdefault((r.seq, r.checkpointing), []).append(r)
    out = []
    for (seq, ckpt), rows in sorted(groups.items()):
        if len({r.batch for r in rows}) < 2:
            continue
        rows.sort(key=lambda r: r.batch)
        slope, intercept, r2 = linear_fit([r.batch for r in rows], [int(r.peak_bytes or 0) for r in rows])
        out.append(BatchFit(seq=seq, checkpointing=ckpt, batches=tuple(r.batch for r in rows),
                            slope_bytes_per_sample=round(slope), intercept_bytes=round(intercept), r2=r2,
                            bytes_per_layer_token_hidden=slope / (shape.n_layers * seq * shape.hidden)))
    return out


def checkpointing_trades(runs: list[PointResult] | tuple[PointResult, ...]) -> list[CheckpointingTrade]:
    """Pair each (batch, seq) measured with ``none`` and with another checkpointing mode."""
    by_key = {(r.batch, r.seq, r.checkpointing): r for r in runs if r.fits}
    out = []
    for (b, s, ckpt), with_ in sorted(by_key.items()):
        without = by_key.get((b, s, "none"))
        if ckpt == "none" or without is None:
            continue
        out.append(CheckpointingTrade(batch=b, seq=s, peak_without=int(without.peak_bytes or 0),
                                      peak_with=int(with_.peak_bytes or 0),
                                      seconds_without=float(without.step_seconds or 0.0),
                                      seconds_with=float(with_.step_seconds or 0.0)))
    return out


def estimate_peak(config: dict[str, Any], spec: RunSpec) -> int | None:
    """The analytic estimate's peak for the same spec, or None when the estimate cannot say."""
    try:
        from memfit.estimate import estimate_memory  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        return int(estimate_memory(ModelShape.from_hf_config(config), spec).peak_bytes)
    except MemfitError:
        return None


def estimated_max_batch(config: dict[str, Any], spec: RunSpec, limit_bytes: int, cap: int = 4096) -> int | None:
    """The largest batch whose estimate fits ``limit_bytes`` (estimates are monotone in batch), or None."""
    if estimate_peak(config, spec.with_(batch=1)) is None:
        return None
    lo, hi = 0, 1
    while hi <= cap and (estimate_peak(config, spec.with_(batch=hi)) or 0) <= limit_bytes:
        lo, hi = hi, hi * 2
    hi = min(hi, cap + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (estimate_peak(config, spec.with_(batch=mid)) or 0) <= limit_bytes:
            lo = mid
        else:
            hi = mid
    return lo


def bisect_max_batch(measure: Measure, spec: RunSpec, *, start: int, cap: int = 1024,
                     known: dict[int, PointResult] | None = None) -> tuple[int, list[PointResult]]:
    """The largest batch for which ``measure(spec.with_(batch=b)).fits``, from a starting guess.

    Fits at ``start``: double until it does not (or ``cap``); does not fit: halve until it does; then
    bisect between the last fitting and the first failing batch. Returns 0 when batch 1 does not fit.
    ``known`` holds points already measured (the sweep's), which are not measured again.
    """
    probes: list[PointResult] = []
    seen: dict[int, bool] = {}

    def fits(b: int) -> bool:
        if b not in seen and known and b in known:
            probes.append(known[b])
            seen[b] = known[b].fits
        if b not in seen:
            r = measure(spec.with_(batch=b))
            probes.append(r)
            seen[b] = r.fits
        return seen[b]

    b = max(1, min(start, cap))
    if fits(b):
        lo, hi = b, None
        while hi is None:
            nxt = min(lo * 2, cap)
            if nxt == lo:
                return lo, probes
            if fits(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        hi, lo = b, 0
        while lo == 0 and hi > 1:
            nxt = max(1, hi // 2)
            if fits(nxt):
                lo = nxt
            else:
                hi = nxt
        if lo == 0:
            return 0, probes
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


# ---- running points ----------------------------------------------------------------------------

def measure_in_subprocess(config: dict[str, Any], spec: RunSpec, *, device: str, steps: int, warmup: int = 1,
                          memory_limit: int | None = None) -> PointResult:
    """Run :func:`memfit.measure.point.measure_point` in a fresh ``python -m memfit.measure.worker``."""
    request = {"config": config, "spec": spec.to_dict(), "device": device, "steps": steps, "warmup": warmup,
               "memory_limit": memory_limit}
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        proc = subprocess.run([sys.executable, "-m", "memfit.measure.worker"], input=json.dumps(request),
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise MemfitError(f"measuring batch {spec.batch}, seq {spec.seq} took over {WORKER_TIMEOUT_S} s: "
                          "use smaller --batch/--seq or --steps") from exc
    reply = _last_json_line(proc.stdout)
    if reply is None:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        if proc.returncode in (-9, 137):
            return PointResult(batch=spec.batch, seq=spec.seq, checkpointing=spec.checkpointing, device=device,
                               fits=False, error=f"does not fit at batch {spec.batch}: the worker was killed "
                               "(host out of memory)")
        raise MemfitError(f"the measuring worker failed at batch {spec.batch}, seq {spec.seq}: {tail[0]}")
    if not reply.get("ok"):
        if reply.get("kind") == "memfit":
            raise MemfitError(reply["error"])
        raise MemfitError(f"measuring batch {spec.batch}, seq {spec.seq} failed: {reply.get('error')}")
    return PointResult.from_dict(reply["result"])


def _last_json_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(reply, dict):
                return reply
    return None


def sweep_specs(spec: RunSpec, *, batches: list[int], seqs: list[int], checkpointing: list[str]) -> list[RunSpec]:
    """The points of a sweep in run order: checkpointing mode, then seq, then batch."""
    return [spec.with_(batch=b, seq=s, checkpointing=c) for c in checkpointing for s in seqs for b in batches]


def run_sweep(config: dict[str, Any], spec: RunSpec, *, model: str, batches: list[int], seqs: list[int],
              checkpointing: list[str], device: str, steps: int = 3, memory_limit: int | None = None,
              max_batch: bool = False, isolate: bool = True,
              on_point: Callable[[RunSpec, PointResult | None], None] | None = None) -> SweepResult:
    """Measure every (checkpointing, seq, batch) point, then fit, pair and (optionally) bisect the max batch.

    ``isolate=False`` measures in this process (for tests); ``on_point(spec, result)`` is called before
    (result None) and after each point, for a progress bar.
    """
    shape = ModelShape.from_hf_config(config)

    def measure(s: RunSpec) -> PointResult:
        if on_point:
            on_point(s, None)
        if isolate:
            r = measure_in_subprocess(config, s, device=device, steps=steps, memory_limit=memory_limit)
        else:
            from memfit.measure.point import measure_point

            r = measure_point(config, s, device=device, steps=steps, memory_limit=memory_limit)
        r = r.with_estimate(estimate_peak(config, s.with_(device="cuda" if device == "cuda" else "cpu")))
        if on_point:
            on_point(s, r)
        return r

    runs = [measure(s) for s in sweep_specs(spec, batches=batches, seqs=seqs, checkpointing=checkpointing)]
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
    return SweepResult(model=model, spec=spec, device=device, runs=tuple(runs), fits=tuple(batch_fits(runs, shape)),
                       trades=tuple(checkpointing_trades(runs)), max_batch=best, memory_limit=memory_limit)


def _device_total(device: str) -> int | None:
    if device != "cuda":
        return None
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)
