"""The token-length histogram that ``memfit lengths --json`` carries (so a report can draw the distribution
and its CDF without the per-example lengths).

Bins are ``[edge, edge + width)`` tokens; ``width`` is 1, 2 or 5 times a power of ten, the smallest such
width giving at most ``target`` bins over ``[min, max]``; the first edge is ``min`` rounded down to a
multiple of the width. Worked example: lengths ``3, 7, 12, 12, 25`` with ``target=5``: the span is
25 - 3 + 1 = 23 tokens, 23 / 5 = 4.6 -> width 5; edges 0, 5, ..., 30; counts ``[1, 1, 2, 0, 0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True, slots=True)
class LengthHistogram:
    """``counts[i]`` examples have ``edges[i] <= length < edges[i + 1]`` tokens."""

    bin_width: int
    edges: tuple[int, ...]
    counts: tuple[int, ...]

    @property
    def count(self) -> int:
        return sum(self.counts)

    def breakdown(self) -> dict[str, int]:
        """``"<lo>-<hi>"`` -> examples in that bin (hi exclusive)."""
        return {f"{lo}-{hi}": c for lo, hi, c in zip(self.edges, self.edges[1:], self.counts, strict=False)}

    def to_dict(self) -> dict[str, Any]:
        return {"bin_width": self.bin_width, "edges": list(self.edges), "counts": list(self.counts)}


def _bin_width(span: int, target: int) -> int:
    raw = span / max(target, 1)
    if raw <= 1:
        return 1
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if mult * power >= raw:
            return int(mult * power)
    return int(10 * power)


def length_histogram(lengths: Sequence[int], target: int = 40) -> LengthHistogram:
    """Count ``lengths`` into at most about ``target`` round bins (see the module docstring).

    >>> length_histogram([3, 7, 12, 12, 25], target=5).counts
    (1, 1, 2, 0, 0, 1)
    """
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if not lens.size:
        return LengthHistogram(bin_width=1, edges=(0, 1), counts=(0,))
    lo, hi = int(lens.min()), int(lens.max())
    width = _bin_width(hi - lo + 1, target)
    first = lo // width * width
    n_bins = hi // width - first // width + 1
    counts = np.bincount((lens - first) // width, minlength=n_bins)
    edges = tuple(first + i * width for i in range(n_bins + 1))
    return LengthHistogram(bin_width=width, edges=edges, counts=tuple(int(c) for c in counts))
