"""Chart geometry as small pure functions: scales, ticks, stacks, step areas, waterfalls, downsampling.

Nothing here knows about HTML or SVG strings; the chart modules turn these numbers into elements. Screen
coordinates follow SVG: x grows to the right, y grows downwards (so a y scale maps 0 bytes to the bottom).

Worked example (the unit tests check it): two moments holding ``{"weights": 2, "activations": 4}`` and
``{"weights": 2, "activations": 1}`` bytes on an x scale ``[0, 2] -> [0, 100]`` and a y scale
``[0, 8] -> [80, 0]`` (80 px tall, 10 px per byte) give a ``weights`` band from y = 80 (0 bytes) up to
y = 60 (2 bytes) across x = 0..100, and an ``activations`` band on top of it reaching y = 20 (6 bytes)
over the first moment (x = 0..50) and y = 50 (3 bytes) over the second: see :func:`step_area_polygons`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class LinearScale:
    """Maps the domain ``[d0, d1]`` linearly onto the range ``[r0, r1]`` (either may be decreasing).

    >>> LinearScale(0, 10, 100, 200)(2.5)
    125.0
    >>> LinearScale(0, 8, 80, 0)(2)  # an SVG y axis: 0 at the bottom (80 px), 8 at the top
    60.0
    """

    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, value: float) -> float:
        if self.d1 == self.d0:
            return float(self.r0)
        return self.r0 + (value - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def nice_step(span: float, target: int = 5) -> float:
    """The tick step for about ``target`` intervals over ``span``: 1, 2 or 5 times a power of ten, the
    smallest such step with at most ``target`` intervals.

    >>> nice_step(73.9, 5)  # 73.9 / 5 = 14.8 -> 20
    20.0
    >>> nice_step(1.0, 4)  # 0.25 -> 0.5
    0.5
    """
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(target, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    for mult in (1.0, 2.0, 5.0, 10.0):
        if mult * power >= raw * (1 - 1e-9):
            return mult * power
    return 10.0 * power  # unreachable: 10 x power >= raw always


def nice_max(high: float, target: int = 5) -> float:
    """The top of an axis from 0 that holds ``high``: the next multiple of :func:`nice_step` at or above it.

    >>> nice_max(73.9)
    80.0
    >>> nice_max(0)
    1.0
    """
    if high <= 0:
        return 1.0
    step = nice_step(high, target)
    return math.ceil(high / step - 1e-9) * step


def nice_ticks(low: float, high: float, target: int = 5) -> list[float]:
    """Tick values: the multiples of :func:`nice_step` ``(high - low, target)`` that lie in ``[low, high]``.

    >>> nice_ticks(0, 80)
    [0.0, 20.0, 40.0, 60.0, 80.0]
    >>> nice_ticks(68, 572, 4)  # step 200 (504/4 = 126 -> 200)
    [200.0, 400.0]
    """
    if high < low:
        low, high = high, low
    step = nice_step(high - low, target)
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    # round away float noise (0.1 * 3 = 0.30000000000000004) at the step's own precision
    digits = max(0, -math.floor(math.log10(step)) + 1)
    return [round(i * step, digits) for i in range(first, last + 1)]


def stack(parts: Mapping[str, int | float], categories: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Cumulative ``(bottom, top)`` of each category stacked in ``categories`` order (absent ones are 0).

    >>> stack({"weights": 2, "activations": 4}, ["weights", "gradients", "activations"])
    {'weights': (0, 2), 'gradients': (2, 2), 'activations': (2, 6)}
    """
    out: dict[str, tuple[float, float]] = {}
    bottom: float = 0
    for cat in categories:
        top = bottom + max(parts.get(cat, 0) or 0, 0)
        out[cat] = (bottom, top)
        bottom = top
    return out


@dataclass(frozen=True, slots=True)
class Segment:
    """What is alive from ``x0`` to ``x1`` (a step moment, or the time between two allocation events)."""

    x0: float
    x1: float
    parts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def step_area_polygons(segments: Sequence[Segment], categories: Sequence[str], xs: LinearScale,
                       ys: LinearScale) -> dict[str, list[Point]]:
    """One closed polygon per category for a stacked step area: each segment holds its level flat from
    ``x0`` to ``x1``. The polygon runs along the category's top from left to right and back along its
    bottom. Categories that are zero everywhere get no polygon.

    For the module docstring's example the ``weights`` band is
    ``[(0,60), (50,60), (50,60), (100,60), (100,80), (50,80), (50,80), (0,80)]``: the top at 2 bytes
    (y = 80 - 2 x 10 = 60) for both moments, the bottom at 0 (y = 80).
    """
    stacks = [stack(s.parts, categories) for s in segments]
    out: dict[str, list[Point]] = {}
    for cat in categories:
        if not any(st[cat][1] > st[cat][0] for st in stacks):
            continue
        top: list[Point] = []
        bottom: list[Point] = []
        for seg, st in zip(segments, stacks, strict=True):
            lo, hi = st[cat]
            top += [(xs(seg.x0), ys(hi)), (xs(seg.x1), ys(hi))]
            bottom += [(xs(seg.x0), ys(lo)), (xs(seg.x1), ys(lo))]
        out[cat] = top + bottom[::-1]
    return out


def moment_segments(parts: Sequence[Mapping[str, int]]) -> list[Segment]:
    """Equal-width segments for a list of step moments: moment ``i`` spans ``[i, i + 1]``.

    >>> [(s.x0, s.x1) for s in moment_segments([{"a": 1}, {"a": 2}])]
    [(0, 1), (1, 2)]
    """
    return [Segment(i, i + 1, p) for i, p in enumerate(parts)]


def timeline_segments(times: Sequence[float], parts: Sequence[Mapping[str, int]]) -> list[Segment]:
    """Segments from timestamped events: event ``i`` holds until event ``i + 1``; the last one holds for the
    mean gap (or 1 when there is a single event), so it stays visible.

    >>> [(s.x0, s.x1) for s in timeline_segments([0, 2, 3], [{}, {}, {}])]
    [(0, 2), (2, 3), (3, 4.5)]
    """
    n = len(times)
    if n == 0:
        return []
    gap = (times[-1] - times[0]) / (n - 1) if n > 1 else 1.0
    gap = gap if gap > 0 else 1.0
    ends = [*times[1:], times[-1] + gap]
    return [Segment(t0, t1, p) for t0, t1, p in zip(times, ends, parts, strict=True)]


def downsample_max(totals: Sequence[float], limit: int) -> list[int]:
    """Indices to keep so that at most ``limit`` points remain: cut the series into ``limit`` equal buckets
    and keep the largest point of each (the peak always survives), in order.

    >>> downsample_max([1, 5, 2, 2, 9, 1, 3, 4], 3)  # buckets [0:2] [2:5] [5:8] (i * 8 // 3)
    [1, 4, 7]
    >>> downsample_max([3, 1], 5)
    [0, 1]
    """
    n = len(totals)
    if n <= limit:
        return list(range(n))
    keep = []
    for b in range(limit):
        lo, hi = b * n // limit, (b + 1) * n // limit
        if hi > lo:
            keep.append(max(range(lo, hi), key=lambda i: (totals[i], -i)))
    return keep


def waterfall(start: float, deltas: Sequence[float]) -> list[tuple[float, float]]:
    """Floating bars of a waterfall: the start bar ``(0, start)``, then for each change (a saving is
    negative) the span ``(low, high)`` between the level before and after it.

    >>> waterfall(70, [-40, -10, 5])
    [(0.0, 70.0), (30.0, 70.0), (20.0, 30.0), (20.0, 25.0)]
    """
    bars = [(float(min(start, 0)), float(max(start, 0)))]
    level = float(start)
    for d in deltas:
        after = level + d
        bars.append((min(level, after), max(level, after)))
        level = after
    return bars


def bands(widths: Sequence[int], total: float, gap: float = 0.0) -> list[tuple[float, float]]:
    """Split ``total`` pixels into consecutive bands proportional to ``widths`` with ``gap`` between them:
    ``(start, width)`` each. For bar groups and row layouts.

    >>> bands([1, 1, 2], 100, gap=10)  # 80 px to share: 20, 20, 40
    [(0.0, 20.0), (30.0, 20.0), (60.0, 40.0)]
    """
    n = len(widths)
    if n == 0:
        return []
    room = total - gap * (n - 1)
    whole = sum(widths) or 1
    out = []
    x = 0.0
    for w in widths:
        width = room * w / whole
        out.append((x, width))
        x += width + gap
    return out
