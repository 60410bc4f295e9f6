"""A timeline point, what the trace and measure engines record at each allocation and free (plain data, no
torch: reports read it), and the downsampling that bounds it in JSON. Recorded by
:class:`memfit.runtime.timeline.TimelineRecorder`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memfit.estimate.category import Category

__all__ = ["MAX_TIMELINE_POINTS", "TimelinePoint", "downsample"]

MAX_TIMELINE_POINTS = 2000
"""Points a timeline keeps in JSON (about 150 B each: 300 KB at most); the HTML draws at most 600 of them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelinePoint:
    """What is alive after event ``t`` (counted from 0), by category; the event's operator, phase and module."""

    t: int
    phase: str
    module: str
    op: str | None
    by_category: dict[Category, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_category.values())

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "phase": self.phase, "module": self.module, "op": self.op,
                "bytes_by_category": {str(c): v for c, v in self.by_category.items() if v}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimelinePoint:
        return cls(t=int(d["t"]), phase=str(d["phase"]), module=str(d["module"]), op=d.get("op"),
                   by_category={Category(k): int(v) for k, v in d["bytes_by_category"].items()})


def downsample(points: Sequence[TimelinePoint], limit: int = MAX_TIMELINE_POINTS) -> list[TimelinePoint]:
    """At most ``limit`` points: the first, the last, and the highest of each of ``limit - 2`` equal buckets
    of the points between them (the first of equals), in time order. The peak is always kept.

    Worked example: totals ``[1, 5, 2, 2, 9, 1, 3, 4, 0, 2]``, limit 5: keep 0 and 9; the 8 between split
    into 3 buckets ``[1:3] [3:6] [6:9]`` (``1 + i * 8 // 3``): highest 5 (index 1), 9 (index 4), 4 (index 7):
    indices ``[0, 1, 4, 7, 9]``.
    """
    n = len(points)
    if n <= limit:
        return list(points)
    if limit < 3:
        raise ValueError("a timeline keeps at least 3 points: the first, the last and the peak")
    totals = [p.total for p in points]
    inner, buckets = n - 2, limit - 2
    keep = [0]
    for b in range(buckets):
        lo, hi = 1 + b * inner // buckets, 1 + (b + 1) * inner // buckets
        if hi > lo:
            keep.append(max(range(lo, hi), key=lambda i: (totals[i], -i)))
    keep.append(n - 1)
    return [points[i] for i in keep]
