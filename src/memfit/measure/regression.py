"""What a sweep's points say together: peak against micro-batch as a least-squares line, and the
checkpointing trade. Pure Python.

The line, one per (seq, checkpointing), over the points that fit (ordinary least squares)::

    peak(b) = slope * b + intercept          slope = bytes per sample, intercept = model states + ...
    R^2 = 1 - SS_res / SS_tot
    activation constant c = slope / (L * s * h)   bytes per layer x token x hidden (the rule of thumb's ~20)

Worked example: peaks 10, 14, 22 MB at b = 2, 4, 8 give slope 2 MB, intercept 6 MB, R^2 = 1; with
L = 4, s = 128, h = 256 the constant is 2e6 / 131072 = 15.3 B.

The checkpointing trade, per (batch, seq) measured with and without: saved = peak_none - peak_full,
fraction = saved / peak_none, slowdown = t_full / t_none, and the advice (:class:`TradeAdvice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.constants import RULE_OF_THUMB_BYTES
from memfit.estimate.shape import ModelShape
from memfit.measure.result import PointResult


@dataclass(frozen=True, kw_only=True, slots=True)
class PeakVsBatch:
    """The least-squares line of peak bytes against micro-batch, for one (seq, checkpointing)."""

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
                "rule_of_thumb_bytes": RULE_OF_THUMB_BYTES}


class TradeAdvice(StrEnum):
    """Whether checkpointing is worth its time at one point (:attr:`CheckpointingTrade.advice`)."""

    TAKE = "take"
    SKIP = "skip"  # activations are not the cost here
    ONLY_TO_FIT = "only_to_fit"  # take it only if the run does not fit without it


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
    def advice(self) -> TradeAdvice:
        """Take it when the share of memory saved is at least the share of time added, or when it saves 20% or
        more for at most 50% more time (20 to 40% slower is checkpointing's usual price); skip it under 5%
        saved; otherwise take it only to make a run fit."""
        if self.fraction_saved < 0.05:
            return TradeAdvice.SKIP
        if self.fraction_saved >= self.slowdown - 1 or (self.fraction_saved >= 0.2 and self.slowdown <= 1.5):
            return TradeAdvice.TAKE
        return TradeAdvice.ONLY_TO_FIT

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "seq": self.seq, "peak_without": self.peak_without,
                "peak_with": self.peak_with, "saved_bytes": self.saved_bytes,
                "fraction_saved": self.fraction_saved, "seconds_without": self.seconds_without,
                "seconds_with": self.seconds_with, "slowdown": self.slowdown, "advice": str(self.advice)}


def least_squares(xs: list[int], ys: list[int]) -> tuple[float, float, float]:
    """Ordinary least squares: ``(slope, intercept, r2)``; r2 = 1.0 when y does not vary.

    >>> least_squares([2, 4, 8], [10, 14, 22])
    (2.0, 6.0, 1.0)
    """
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise MemfitError("a line of peak vs batch needs at least two different batch sizes that fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 if ss_tot == 0 else 1.0 - ss_res / ss_tot
    return slope, intercept, r2


def peak_vs_batch(runs: list[PointResult] | tuple[PointResult, ...], shape: ModelShape) -> list[PeakVsBatch]:
    """One :class:`PeakVsBatch` per (seq, checkpointing) with two or more batch sizes that fit."""
    groups: dict[tuple[int, str], list[PointResult]] = {}
    for r in runs:
        if r.fits and r.peak_bytes is not None:
            groups.setdefault((r.seq, r.checkpointing), []).append(r)
    out = []
    for (seq, ckpt), rows in sorted(groups.items()):
        if len({r.batch for r in rows}) < 2:
            continue
        rows.sort(key=lambda r: r.batch)
        slope, intercept, r2 = least_squares([r.batch for r in rows], [int(r.peak_bytes or 0) for r in rows])
        out.append(PeakVsBatch(seq=seq, checkpointing=ckpt, batches=tuple(r.batch for r in rows),
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
