"""The CUDA caching allocator replayed over a step's allocations: what ``torch.cuda.memory_reserved`` peaks at.

``torch.cuda.max_memory_allocated`` counts the blocks handed to tensors; ``max_memory_reserved`` counts the
segments the allocator took from the driver (``cudaMalloc``) to carve them from. The difference is the
allocator's rounding and fragmentation. This module replays a sequence of ``malloc(size)`` / ``free`` calls
through a model of torch 2.13's ``DeviceCachingAllocator`` (``c10/cuda/CUDACachingAllocator.cpp``; read at
pytorch/pytorch commit 001074d, whose rules below are the 2.x ones), one stream, no CUDA graphs:

=============================  ====================================================================================
rule                           source (CUDACachingAllocator.cpp)
=============================  ====================================================================================
round to 512 B                 ``round_size``: ``size < kMinBlockSize ? kMinBlockSize : 512 * ceil(size / 512)``
                               (``kMinBlockSize = 512``; ``roundup_power2_divisions`` unset, the default)
two pools                      ``get_pool``: ``size <= kSmallSize`` (1 MiB) small pool, else large pool
segment size                   ``get_allocation_size``: ``<= 1 MiB`` -> ``kSmallBuffer`` 2 MiB; ``< kMinLargeAlloc``
                               (10 MiB) -> ``kLargeBuffer`` 20 MiB; else rounded up to ``kRoundLarge`` (2 MiB)
best fit                       ``get_free_block``: ``pool.blocks.lower_bound(size)`` over blocks ordered by
                               (size, address): the smallest cached free block >= size, lowest address first
oversize rules                 ``get_free_block``: a request < ``max_split_size`` never takes a cached block >=
                               ``max_split_size``; a request >= it takes one only if block < request + 20 MiB
split                          ``should_split``: small pool: remainder >= 512 B; large pool: request <
                               ``max_split_size`` and remainder > 1 MiB (else the whole block is handed out and
                               counted as allocated, ``allocated_bytes += block->size`` in ``alloc_found_block``)
merge on free                  ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours
                               of the same segment, then returns to its pool (never to the driver during a step)
out of memory                  ``malloc``: when ``cudaMalloc`` fails, ``release_cached_blocks`` frees every cached
                               segment that is one whole free block, and the allocation is retried
``expandable_segments:True``   ``try_allocate_expandable_block`` / ``map_block``: one segment per pool that grows
                               by pages (2 MiB small, 20 MiB large, ``ExpandableSegment``); a request that no
                               free block holds maps ``ceil((size - free tail) / page)`` pages at the end, merged
                               with a free block just before it; ``should_split``: remainder >= 512 B in both
                               pools; ``get_free_block`` ranks the free block at the growing end last
=============================  ====================================================================================

Not modelled: several streams (each has its own free blocks), CUDA-graph private pools,
``garbage_collection_threshold``, ``roundup_power2_divisions``, ``release_available_cached_blocks`` (frees
oversize blocks before a retry), and unmapping free pages of an expandable segment on out-of-memory.

Worked example (default settings), the docstring's rules only: ``a = malloc(6 MiB)``: large pool, 6 MiB < 10 MiB
-> a 20 MiB segment, split (remainder 14 MiB > 1 MiB): reserved 20 MiB, allocated 6 MiB. ``b = malloc(12 MiB)``:
the 14 MiB free block fits (best fit), split (2 MiB > 1 MiB): allocated 18 MiB. ``free(a)``; ``c = malloc(7 MiB)``:
the cached blocks are 6 MiB and 2 MiB, none fits -> a new 20 MiB segment: reserved 40 MiB for 19 MiB allocated
(21 MiB fragmentation). With ``expandable_segments:True``: a maps one 20 MiB page, b takes 12 MiB of its 14 MiB
free tail, c (7 MiB) fits neither a's freed 6 MiB nor the 2 MiB tail, so it maps one more page after the tail:
reserved 40 MiB too. The tests work several such sequences by hand (``tests/estimate/test_allocator.py``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from memfit.errors import MemfitError
from memfit.units import BYTES_PER_MIB

MIN_BLOCK_BYTES = 512  # kMinBlockSize: every block is a multiple of 512 B
SMALL_SIZE_BYTES = 1 * BYTES_PER_MIB  # kSmallSize: the largest "small" request
SMALL_BUFFER_BYTES = 2 * BYTES_PER_MIB  # kSmallBuffer: small requests are packed in 2 MiB segments
MIN_LARGE_ALLOC_BYTES = 10 * BYTES_PER_MIB  # kMinLargeAlloc: requests of 1-10 MiB get a 20 MiB segment
LARGE_BUFFER_BYTES = 20 * BYTES_PER_MIB  # kLargeBuffer
ROUND_LARGE_BYTES = 2 * BYTES_PER_MIB  # kRoundLarge: larger requests are rounded to 2 MiB
NOTABLE_SAVING_FRACTION = 0.02  # a setting is worth naming when it lowers the reserved peak by >= 2% ...
NOTABLE_SAVING_BYTES = 256 * BYTES_PER_MIB  # ... and by >= 256 MiB (the old rule's fixed allowance)
MAX_SPLIT_CANDIDATES_MB = (64, 128, 256, 512)  # max_split_size_mb values tried by :func:`advise`

EventKind = Literal["alloc", "free", "resize"]


def round_size(nbytes: int) -> int:
    """``round_size``: the block size of a request.

    >>> round_size(1), round_size(512), round_size(513), round_size(0)
    (512, 512, 1024, 512)
    """
    return MIN_BLOCK_BYTES if nbytes < MIN_BLOCK_BYTES else -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment ``cudaMalloc`` takes for a block no cached one holds.

    >>> [allocation_size(s) // 2**20 for s in (512, 2**20, 2**20 + 512, 10 * 2**20, 21 * 2**20 + 1)]
    [2, 2, 20, 10, 22]
    """
    if size <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorSettings:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` options the replay honours (defaults: torch's)."""

    expandable_segments: bool = False
    max_split_size: int | None = None  # bytes; None: unlimited (torch's default, SIZE_MAX)

    @property
    def conf(self) -> str:
        """The ``PYTORCH_CUDA_ALLOC_CONF`` value: ``expandable_segments:True``, ``max_split_size_mb:256``, ``""``."""
        parts = []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size // BYTES_PER_MIB}")
        return ",".join(parts)

    @classmethod
    def parse(cls, text: str | None) -> AllocatorSettings:
        """Read a ``PYTORCH_CUDA_ALLOC_CONF`` value; options the replay does not model are refused.

        >>> AllocatorSettings.parse("expandable_segments:True,max_split_size_mb:128").conf
        'expandable_segments:True,max_split_size_mb:128'
        """
        expandable, split = False, None
        for item in filter(None, (p.strip() for p in (text or "").split(","))):
            key, _, value = item.partition(":")
            if key == "expandable_segments" and value in ("True", "False"):
                expandable = value == "True"
            elif key == "max_split_size_mb" and value.isdigit() and int(value) > 0:
                split = int(value) * BYTES_PER_MIB
            else:
                raise MemfitError(f"PYTORCH_CUDA_ALLOC_CONF item {item!r}: memfit models "
                                  "expandable_segments:True|False and max_split_size_mb:<MiB>; drop the others")
        return cls(expandable_segments=expandable, max_split_size=split)


class _Block:
    __slots__ = ("allocated", "next", "pool", "prev", "ptr", "segment", "size")

    def __init__(self, ptr: int, size: int, pool: int, segment: int) -> None:
        self.ptr, self.size, self.pool, self.segment = ptr, size, pool, segment
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None


SMALL, LARGE = 0, 1
_UNBOUNDED = 1 << 62


class CachingAllocator:
    """A replay of ``DeviceCachingAllocator`` (module docstring): ``malloc(key, nbytes)``, ``free(key)``.

    ``capacity`` (bytes the allocator may reserve) triggers the out-of-memory path: cached whole segments are
    released and the request retried; if it still does not fit, ``oom`` is set (the replay goes on).
    """

    def __init__(self, settings: AllocatorSettings | None = None, *, capacity: int | None = None) -> None:
        self.settings = settings or AllocatorSettings()
        self.capacity = capacity
        self.allocated_bytes = self.reserved_bytes = 0
        self.peak_allocated_bytes = self.peak_reserved_bytes = 0
        self.segments = 0
        self.oom = False
        self._free: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])  # (size, ptr) sorted, per pool
        self._blocks: dict[int, _Block] = {}  # ptr -> free block
        self._live: dict[Hashable, _Block] = {}
        self._next_ptr = itertools.count(1)
        self._tail: list[_Block | None] = [None, None]  # expandable: the last mapped block of each pool's segment
        self._mapped_end = [0, 0]
        self._split_limit = self.settings.max_split_size or _UNBOUNDED

    # ---- public ---------------------------------------------------------------------------------
    def malloc(self, key: Hashable, nbytes: int) -> int:
        """Allocate a block for ``nbytes`` under ``key``; returns the block's size (what ``allocated`` counts)."""
        if key in self._live:
            self.free(key)
        size = round_size(nbytes)
        pool = SMALL if size <= SMALL_SIZE_BYTES else LARGE
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._new_block(pool, size)
        if self._should_split(block, size):
            rest = _Block(block.ptr + size, block.size - size, pool, block.segment)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            if self._tail[pool] is block:
                self._tail[pool] = rest
            self._insert(rest)
        block.allocated = True
        self._live[key] = block
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block.size

    def free(self, key: Hashable) -> None:
        """Free the block of ``key`` (unknown keys are ignored: a storage that predates the replay)."""
        block = self._live.pop(key, None)
        if block is None:
            return
        block.allocated = False
        self.allocated_bytes -= block.size
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._merge(block, other)
        self._insert(block)

    # ---- the allocator's rules --------------------------------------------------------------------
    def _get_free_block(self, pool: int, size: int) -> _Block | None:
        free = self._free[pool]
        i = bisect.bisect_left(free, (size, -1))
        if i == len(free):
            return None
        block = self._blocks[free[i][1]]
        if self.settings.expandable_segments and block is self._tail[pool]:
            # the free block at the growing end ranks last (its "expandable size" is the address space left)
            if i + 1 < len(free):
                block = self._blocks[free[i + 1][1]]
        limit = self._split_limit
        if size < limit <= block.size:
            return None
        if size >= limit and block.size >= size + LARGE_BUFFER_BYTES:
            return None
        self._remove(block)
        return block

    def _should_split(self, block: _Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool == SMALL or self.settings.expandable_segments:
            return remaining >= MIN_BLOCK_BYTES
        return size < self._split_limit and remaining > SMALL_SIZE_BYTES

    def _new_block(self, pool: int, size: int) -> _Block:
        if self.settings.expandable_segments:
            return self._expand(pool, size)
        alloc = allocation_size(size)
        self._reserve(alloc)
        self.segments += 1
        return _Block(next(self._next_ptr) << 48, alloc, pool, self.segments)

    def _expand(self, pool: int, size: int) -> _Block:
        """Map pages at the end of the pool's one segment, merged with the free block before them."""
        page = SMALL_BUFFER_BYTES if pool == SMALL else LARGE_BUFFER_BYTES
        tail = self._tail[pool]
        have = tail.size if tail is not None and not tail.allocated else 0
        mapped = -(-(size - have) // page) * page
        self._reserve(mapped)
        if self._mapped_end[pool] == 0:
            self.segments += 1
        start = self._mapped_end[pool] + (pool << 60)
        self._mapped_end[pool] += mapped
        if have:
            assert tail is not None
            self._remove(tail)
            tail.size += mapped
            return tail
        block = _Block(start, mapped, pool, -1 - pool)
        block.prev = tail
        if tail is not None:
            tail.next = block
        self._tail[pool] = block
        return block

    def _reserve(self, nbytes: int) -> None:
        if self.capacity is not None and self.reserved_bytes + nbytes > self.capacity:
            self._release_cached()
            if self.reserved_bytes + nbytes > self.capacity:
                self.oom = True
        self.reserved_bytes += nbytes
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def _release_cached(self) -> None:
        """``release_cached_blocks``: every cached segment that is one whole free block goes back to the driver."""
        if self.settings.expandable_segments:
            return  # unmapping free pages is not modelled (module docstring)
        for pool in (SMALL, LARGE):
            for _size, ptr in list(self._free[pool]):
                block = self._blocks[ptr]
                if block.prev is None and block.next is None:
                    self._remove(block)
                    self.reserved_bytes -= block.size
                    self.segments -= 1

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _merge(self, dst: _Block, src: _Block) -> None:
        self._remove(src)
        if src is dst.prev:
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        if self._tail[dst.pool] is src:
            self._tail[dst.pool] = dst

    def _insert(self, block: _Block) -> None:
        bisect.insort(self._free[block.pool], (block.size, block.ptr))
        self._blocks[block.ptr] = block

    def _remove(self, block: _Block) -> None:
        free = self._free[block.pool]
        i = bisect.bisect_left(free, (block.size, block.ptr))
        if i < len(free) and free[i] == (block.size, block.ptr):
            del free[i]
            del self._blocks[block.ptr]


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorReplay:
    """What a replay gives: the allocator's peaks (``max_memory_allocated`` / ``max_memory_reserved``)."""

    settings: AllocatorSettings
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    segments: int
    oom: bool = False

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved beyond the allocated peak: rounding, segment tails and blocks too small for later requests."""
        return self.reserved_peak_bytes - self.allocated_peak_bytes

    @property
    def fragmentation(self) -> float:
        return self.fragmentation_bytes / self.reserved_peak_bytes if self.reserved_peak_bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"conf": self.settings.conf, "allocated_peak_bytes": self.allocated_peak_bytes,
                "reserved_peak_bytes": self.reserved_peak_bytes, "fragmentation_bytes": self.fragmentation_bytes,
                "fragmentation": self.fragmentation, "segments": self.segments, "oom": self.oom}


def replay(events: Iterable[tuple[EventKind, Hashable, int]], settings: AllocatorSettings | None = None, *,
           capacity: int | None = None) -> AllocatorReplay:
    """Replay ``(kind, key, nbytes)`` events: ``alloc`` (``nbytes`` requested), ``free`` and ``resize`` (``nbytes``
    the storage's new size: a new block is taken, then the old one freed, as ``resize_`` copies into a new
    allocation)."""
    a = CachingAllocator(settings, capacity=capacity)
    for kind, key, nbytes in events:
        if kind == "alloc":
            a.malloc(key, nbytes)
        elif kind == "free":
            a.free(key)
        else:
            a.malloc(("resized", key), nbytes)
            a.free(key)
            a._live[key] = a._live.pop(("resized", key))
    return AllocatorReplay(settings=a.settings, allocated_peak_bytes=a.peak_allocated_bytes,
                           reserved_peak_bytes=a.peak_reserved_bytes, segments=a.segments, oom=a.oom)


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorAdvice:
    """The default settings' replay, the best alternative tried, and whether it is worth naming."""

    default: AllocatorReplay
    best: AllocatorReplay

    @property
    def saving_bytes(self) -> int:
        return self.default.reserved_peak_bytes - self.best.reserved_peak_bytes

    @property
    def notable(self) -> bool:
        """The alternative lowers the reserved peak by >= 2% of it and >= 256 MiB."""
        s = self.saving_bytes
        return s >= NOTABLE_SAVING_BYTES and s >= NOTABLE_SAVING_FRACTION * self.default.reserved_peak_bytes

    def message(self) -> str | None:
        """``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lowers the reserved peak by 1.20 GiB ...`` or None."""
        if not self.notable:
            return None
        gib = 1024**3
        return (f"PYTORCH_CUDA_ALLOC_CONF={self.best.settings.conf} lowers the CUDA allocator's reserved peak by "
                f"{self.saving_bytes / gib:.2f} GiB ({self.default.reserved_peak_bytes / gib:.2f} -> "
                f"{self.best.reserved_peak_bytes / gib:.2f} GiB; fragmentation "
                f"{100 * self.default.fragmentation:.0f}% -> {100 * self.best.fragmentation:.0f}%)")

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default.to_dict(), "best": self.best.to_dict(), "saving_bytes": self.saving_bytes,
                "notable": self.notable, "message": self.message()}


def advise(events: list[tuple[EventKind, Hashable, int]], current: AllocatorSettings | None = None, *,
           replayed: AllocatorReplay | None = None) -> AllocatorAdvice:
    """Replay ``events`` with ``current`` (the run's ``PYTORCH_CUDA_ALLOC_CONF``; default torch's defaults), with
    ``expandable_segments:True`` and with each ``max_split_size_mb`` of :data:`MAX_SPLIT_CANDIDATES_MB`; the best
    is the lowest reserved peak (the simplest setting on a tie: the current one, then expandable segments).
    ``replayed``: ``events`` already replayed under ``current`` (the estimate's own replay), not replayed again."""
    current = current or AllocatorSettings()
    default = replayed if replayed is not None and replayed.settings == current else replay(events, current)
    options = [AllocatorSettings(expandable_segments=True)]
    options += [AllocatorSettings(max_split_size=mb * BYTES_PER_MIB) for mb in MAX_SPLIT_CANDIDATES_MB]
    best = default
    for option in options:
        if option == current:
            continue
        r = replay(events, option)
        if r.reserved_peak_bytes < best.reserved_peak_bytes:
            best = r
    return AllocatorAdvice(default=default, best=best)
