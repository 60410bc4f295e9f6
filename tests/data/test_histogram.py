"""The length histogram ``memfit lengths --json`` carries: round bins, every example counted once."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from memfit.data.histogram import length_histogram


def test_worked_example() -> None:
    """Lengths 3, 7, 12, 12, 25, target 5 bins: span 25 - 3 + 1 = 23, 23 / 5 = 4.6 -> width 5; first edge
    3 // 5 * 5 = 0, last bin holds 25 -> edges 0..30; counts: [0,5) 1, [5,10) 1, [10,15) 2, 0, 0, [25,30) 1."""
    h = length_histogram([3, 7, 12, 12, 25], target=5)
    assert h.bin_width == 5
    assert h.edges == (0, 5, 10, 15, 20, 25, 30)
    assert h.counts == (1, 1, 2, 0, 0, 1)
    assert h.breakdown()["10-15"] == 2
    assert h.to_dict() == {"bin_width": 5, "edges": [0, 5, 10, 15, 20, 25, 30], "counts": [1, 1, 2, 0, 0, 1]}


def test_narrow_range_uses_one_token_bins() -> None:
    h = length_histogram([4, 4, 5], target=40)
    assert (h.bin_width, h.edges, h.counts) == (1, (4, 5, 6), (2, 1))


@given(st.lists(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=300),
       st.integers(min_value=1, max_value=60))
def test_every_length_falls_in_exactly_its_bin(lengths: list[int], target: int) -> None:
    """Oracle: count each length against the edges directly."""
    h = length_histogram(lengths, target=target)
    assert h.count == len(lengths)
    assert len(h.counts) <= target + 2  # rounding the first edge down adds at most one bin (plus the last)
    assert all(b - a == h.bin_width for a, b in zip(h.edges, h.edges[1:], strict=False))
    for lo, hi, c in zip(h.edges, h.edges[1:], h.counts, strict=False):
        assert c == sum(1 for n in lengths if lo <= n < hi)
    assert h.edges[0] <= min(lengths) and max(lengths) < h.edges[-1]
    assert str(h.bin_width).strip("0") in ("1", "2", "5")


def test_empty() -> None:
    assert length_histogram([]).count == 0
    assert length_histogram(random.Random(0).choices(range(10, 20), k=50)).count == 50
