"""The CUDA caching-allocator replay against allocation sequences worked by hand from the allocator's rules.

Every expected figure below is worked in the test's docstring from the rules of c10/cuda/CUDACachingAllocator.cpp
(quoted in :mod:`memfit.estimate.allocator`'s docstring), not from the replay: 512 B rounding, small pool <= 1 MiB
in 2 MiB segments, 1-10 MiB requests in 20 MiB segments, larger ones rounded to 2 MiB, best fit, splitting (small
pool: remainder >= 512 B; large pool: remainder > 1 MiB), merging on free, max_split_size, expandable segments.
"""

from __future__ import annotations

import pytest

from memfit.errors import MemfitError
from memfit.estimate.allocator import AllocatorSettings, CachingAllocator, advise, replay

MiB = 1024**2
KiB = 1024
EXPANDABLE = AllocatorSettings(expandable_segments=True)


def test_small_requests_share_one_2mib_segment() -> None:
    """Three requests of 1 B, 700 B and 300 KiB: rounded to 512 B, 1,024 B and 307,200 B (a multiple of 512),
    all <= 1 MiB: small pool. The first takes a 2 MiB segment and splits (remainder >= 512 B); the others are
    carved from the remainder. Reserved 2 MiB; allocated 512 + 1,024 + 307,200 = 308,736 B."""
    a = CachingAllocator()
    for key, n in (("x", 1), ("y", 700), ("z", 300 * KiB)):
        a.malloc(key, n)
    assert a.reserved_bytes == 2 * MiB
    assert a.allocated_bytes == 308_736
    assert a.segments == 1


def test_fragmentation_of_the_docstring_example() -> None:
    """a = 6 MiB: a 20 MiB segment, split (14 MiB > 1 MiB). b = 12 MiB: best fit is the 14 MiB remainder, split
    (2 MiB > 1 MiB). free(a). c = 7 MiB: cached free blocks are 6 MiB and 2 MiB, neither fits: a second 20 MiB
    segment. Reserved peak 40 MiB; allocated peak 12 + 7 = 19 MiB (a and b were 18 MiB); fragmentation 21 MiB."""
    r = replay([("alloc", "a", 6 * MiB), ("alloc", "b", 12 * MiB), ("free", "a", 0), ("alloc", "c", 7 * MiB)])
    assert r.reserved_peak_bytes == 40 * MiB
    assert r.allocated_peak_bytes == 19 * MiB
    assert r.fragmentation_bytes == 21 * MiB
    assert r.segments == 2


def test_large_request_unsplit_remainder_counts_as_allocated() -> None:
    """A 19.5 MiB request (< 10 MiB? no: >= 10 MiB) gets its own segment rounded to 2 MiB: 20 MiB. Remainder
    0.5 MiB is not > 1 MiB: no split, the block handed out is the whole 20 MiB and ``allocated`` counts 20 MiB
    (``alloc_found_block`` adds ``block->size``)."""
    a = CachingAllocator()
    assert a.malloc("w", 19 * MiB + 512 * KiB) == 20 * MiB
    assert a.allocated_bytes == a.reserved_bytes == 20 * MiB


def test_freed_blocks_merge_and_best_fit_reuses_them() -> None:
    """Two 8 MiB requests in one 20 MiB segment (8 + 8, 4 MiB left). Free both: they merge with each other and
    with the 4 MiB tail into the whole 20 MiB block. A 16 MiB request then fits it (no new segment): reserved
    stays 20 MiB; the remainder (4 MiB > 1 MiB) is split off."""
    r = replay([("alloc", 1, 8 * MiB), ("alloc", 2, 8 * MiB), ("free", 1, 0), ("free", 2, 0), ("alloc", 3, 16 * MiB)])
    assert r.reserved_peak_bytes == 20 * MiB
    assert r.allocated_peak_bytes == 16 * MiB


def test_best_fit_picks_the_smallest_block_that_fits() -> None:
    """Segments: p = 12 MiB in its own 12 MiB segment (>= 10 MiB: rounded to 2 MiB), q = 30 MiB (30 MiB segment).
    Free both. r = 11 MiB: the free blocks are 12 and 30 MiB; best fit is 12 (remainder 1 MiB is not > 1 MiB: no
    split, r holds 12 MiB). s = 29 MiB takes the 30 MiB block (remainder 1 MiB: no split). No new segment:
    reserved 42 MiB; allocated 12 + 30 = 42 MiB."""
    r = replay([("alloc", "p", 12 * MiB), ("alloc", "q", 30 * MiB), ("free", "p", 0), ("free", "q", 0),
                ("alloc", "r", 11 * MiB), ("alloc", "s", 29 * MiB)])
    assert r.reserved_peak_bytes == 42 * MiB
    assert r.allocated_peak_bytes == 42 * MiB
    assert r.segments == 2


def test_max_split_size_keeps_small_requests_out_of_large_blocks() -> None:
    """max_split_size 16 MiB. big = 40 MiB (its own 40 MiB segment), freed. small = 4 MiB: < 16 MiB may not take
    the cached 40 MiB block (>= 16 MiB): a new 20 MiB segment. Reserved 60 MiB. Without the limit small would be
    carved from the 40 MiB block: reserved 40 MiB."""
    seq = [("alloc", "big", 40 * MiB), ("free", "big", 0), ("alloc", "small", 4 * MiB)]
    assert replay(seq, AllocatorSettings(max_split_size=16 * MiB)).reserved_peak_bytes == 60 * MiB
    assert replay(seq).reserved_peak_bytes == 40 * MiB


def test_oversize_request_takes_a_cached_block_within_20mib() -> None:
    """max_split_size 16 MiB. A 60 MiB block cached; a 44 MiB request (>= 16 MiB) may take it since 60 < 44 + 20;
    a 38 MiB request may not (60 >= 38 + 20): it gets a new 38 MiB segment."""
    settings = AllocatorSettings(max_split_size=16 * MiB)
    fits = replay([("alloc", 1, 60 * MiB), ("free", 1, 0), ("alloc", 2, 44 * MiB)], settings)
    assert fits.reserved_peak_bytes == 60 * MiB and fits.allocated_peak_bytes == 60 * MiB
    new = replay([("alloc", 1, 60 * MiB), ("free", 1, 0), ("alloc", 2, 38 * MiB)], settings)
    assert new.reserved_peak_bytes == 98 * MiB


def test_expandable_segments_grow_by_20mib_pages() -> None:
    """expandable_segments:True, the docstring sequence: a = 6 MiB maps one 20 MiB page (split, remainder 14 MiB
    >= 512 B). b = 12 MiB takes 12 of the 14 MiB free tail. free(a). c = 7 MiB: the free blocks are a's 6 MiB and
    the 2 MiB tail, neither fits; 7 - 2 = 5 MiB more is needed at the end: one more 20 MiB page. Reserved 40 MiB."""
    r = replay([("alloc", "a", 6 * MiB), ("alloc", "b", 12 * MiB), ("free", "a", 0), ("alloc", "c", 7 * MiB)],
               EXPANDABLE)
    assert r.reserved_peak_bytes == 40 * MiB


def test_expandable_segments_avoid_the_growing_batch_slivers() -> None:
    """The pattern of the allocator's Note [Expandable Segments]: ten tensors of 50 MiB, then ten of 52 MiB.
    Default: 10 x 50 MiB segments (50 MiB >= 10 MiB: rounded to 2 MiB, no split). Freed; the 52 MiB tensors fit
    none of them: 10 new 52 MiB segments, reserved 500 + 520 = 1,020 MiB.
    Expandable (20 MiB pages): the 1st 50 MiB maps 3 pages (60 MiB, 10 MiB free tail), the 2nd takes the tail and
    maps 2 more (40 MiB), and so on: 10 x 50 = 500 MiB mapped exactly. Freed, they merge into one 500 MiB block;
    the 52 MiB tensors are carved from it until 32 MiB is left, the 10th maps one more page: reserved 520 MiB.
    The saving, 500 MiB, is >= 256 MiB and >= 2% of 1,020 MiB: named."""
    seq: list = [("alloc", i, 50 * MiB) for i in range(10)] + [("free", i, 0) for i in range(10)]
    seq += [("alloc", 10 + i, 52 * MiB) for i in range(10)]
    assert replay(seq).reserved_peak_bytes == 1020 * MiB
    assert replay(seq, EXPANDABLE).reserved_peak_bytes == 520 * MiB
    a = advise(seq)
    assert a.best.settings.expandable_segments and a.saving_bytes == 500 * MiB
    assert a.notable and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in (a.message() or "")


def test_out_of_memory_releases_cached_segments_and_retries() -> None:
    """Capacity 60 MiB. x = 40 MiB (its own segment), freed (cached). y = 50 MiB fits no cached block (40 < 50):
    40 + 50 = 90 > 60, so the cached whole 40 MiB segment is released first: reserved 50 MiB, no OOM. Without a
    capacity the reserved peak is 90 MiB."""
    seq = [("alloc", "x", 40 * MiB), ("free", "x", 0), ("alloc", "y", 50 * MiB)]
    tight = replay(seq, capacity=60 * MiB)
    assert tight.reserved_peak_bytes == 50 * MiB and not tight.oom
    assert replay(seq).reserved_peak_bytes == 90 * MiB
    assert replay(seq, capacity=45 * MiB).oom


def test_no_notable_saving_is_not_named() -> None:
    """One 6 MiB request: 20 MiB reserved by default, 20 MiB (one page) expandable: no saving, nothing named."""
    a = advise([("alloc", 1, 6 * MiB)])
    assert a.saving_bytes == 0 and not a.notable and a.message() is None


def test_alloc_conf_parsing() -> None:
    assert AllocatorSettings.parse("expandable_segments:True").expandable_segments
    assert AllocatorSettings.parse("max_split_size_mb:256").max_split_size == 256 * MiB
    with pytest.raises(MemfitError, match="garbage_collection_threshold"):
        AllocatorSettings.parse("garbage_collection_threshold:0.6")
