"""The largest micro-batch that fits a memory limit: a starting guess from the estimate, then bisection on
measured points. Pure Python (the measuring is a callback).

:func:`estimated_max_batch` doubles then bisects on the analytic estimate (monotone in batch, so a few
dozen estimates); :func:`bisect_max_batch` starts there and measures: fits at the start, double until it
does not (or ``cap``); does not fit, halve until it does; then bisect between the last fitting and the
first failing batch. Worked: limit 13 (batches up to 13 fit) from a start of 4: 4 fits, 8 fits, 16 fails,
then 12 fits, 14 fails, 13 fits: 13, in six measured points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate import estimate_memory
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.measure.result import PointResult

Measure = Callable[[RunSpec], PointResult]


def estimate_peak(config: dict[str, Any], spec: RunSpec) -> int | None:
    """The analytic estimate's peak for the same spec, or None when the estimate cannot say (an architecture
    it does not model, a setting it refuses)."""
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
    """The largest batch for which ``measure(spec.with_(batch=b)).fits``, from a starting guess (module
    docstring). Returns 0 when batch 1 does not fit. ``known`` holds points already measured (the sweep's),
    which are not measured again."""
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
