"""Bin packing on lengths: which items share a row of at most ``max_len`` tokens. Pure numpy.

The rule (largest fit with exact fit and a look-ahead). Rows are filled one at a time, each until nothing
more fits. With room ``r`` left in the row and ``m``, ``M`` the shortest and longest lengths still unplaced:

1. **exact fit**: if an item of length ``r`` is left, take it (the row is full);
2. **look-ahead**: otherwise take the longest item ``s <= r - m`` whose leftover ``x = r - s`` could still be
   filled by some ``j`` of the remaining lengths if they were dense: ``j*m <= x <= j*M`` for some ``j >= 1``
   (equivalently ``ceil(x / M) * m <= x``);
3. otherwise the longest item ``s <= r`` (the row keeps a gap shorter than ``m``); if none fits, the row is
   closed.

Items of one length are used in input order. Rule 2 steers every gap to a size that the remaining lengths
can close, which matters on data with no short items (GSM8K has none under ~60 tokens): best-fit decreasing,
which places items longest first into whichever open row fits best, leaves gaps there that nothing closes.
``bench/bench_pack.py`` measures the rows against the lower bound ``ceil(sum(lengths) / max_len)``.

Cost: one stable sort of the lengths (numpy's radix sort for ``max_len < 65536``), then
O(distinct rows x items per row x log max_len) Python steps, since a row that repeats is worked out once,
then O(n) numpy passes to lay out the indices.

Worked example, ``max_len = 10``, lengths ``[4, 4, 3, 3, 3, 3]`` (sum 20, lower bound 2 rows). Row A: room
10, no item of 10; ``m, M = 3, 4``; the longest ``s <= 7`` is 4 and its leftover 6 = 3 + 3 is fillable: take
item 0; room 6: no 6, the longest ``s <= 3`` is 3, leftover 3 fillable: take item 2; room 3: exact fit, item
3. Row B the same with items 1, 4, 5: two rows, the bound. (Best-fit decreasing puts 4 + 4 in one row, a gap
of 2 that no item fills, and needs three.)
"""

from __future__ import annotations

import gc
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

from memfit.errors import MemfitError

__all__ = ["fill_rows", "pack_lengths"]


def fill_rows(lengths: Sequence[int] | np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Group item indices into rows of total length <= ``max_len`` by the module's rule, in CSR form.

    Args:
        lengths: the item lengths, each in ``1..max_len``.
        max_len: the row length.

    Returns:
        ``(order, row_starts)``: the items of row ``r`` are ``order[row_starts[r]:row_starts[r + 1]]``, in the
        order they were placed (mostly longest first); rows are numbered in the order they were filled.

    Raises:
        MemfitError: ``max_len < 1``, or an item of length 0 or longer than ``max_len``.

    How it is fast: lengths are integers in ``[1, max_len]``, so the unplaced items are a histogram (count per
    length) with a sorted list of the lengths still present, and "the longest length <= x" is one bisection.
    A row is worked out as ``(length, copies)`` steps; while every length it used still has more than one
    row's worth of copies left, the next row would see the same lengths present and make the same choices, so
    the row is repeated ``min((count_left - 1) // copies)`` more times at once. The indices are then laid out
    with a handful of numpy passes.

    >>> order, starts = fill_rows([4, 4, 3, 3, 3, 3], 10)
    >>> [order[starts[r]:starts[r + 1]].tolist() for r in range(len(starts) - 1)]
    [[0, 2, 3], [1, 4, 5]]
    """
    if max_len < 1:
        raise MemfitError(f"the row length must be at least 1 token, not {max_len}: raise --seq-len")
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = int(lens.size)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    lo, hi = int(lens.min()), int(lens.max())
    if lo < 1 or hi > max_len:
        bad = int(np.argmax(lens > max_len)) if hi > max_len else int(np.argmin(lens))
        raise MemfitError(
            f"item {bad} has length {int(lens[bad]):,}, outside 1..{max_len:,}: handle empty and over-long "
            "examples before packing (memfit pack does, see --overflow)"
        )
    # Longest first; stable so equal lengths keep input order. uint16 keys get numpy's radix sort.
    key_dtype = np.uint16 if max_len < 2**16 else np.int64
    order = np.argsort((max_len - lens).astype(key_dtype), kind="stable")
    hist = np.bincount(lens, minlength=max_len + 1)
    # Items of length s are order[first[s] : first[s] + hist[s]] (longer lengths come first in `order`).
    first = (np.cumsum(hist[::-1])[::-1] - hist).tolist()
    count = hist.tolist()
    present = np.flatnonzero(hist).tolist()  # sorted lengths with count > 0

    step_k: list[int] = []  # per step: copies per row, index of its first item in `order`, stride, block
    step_at: list[int] = []
    step_stride: list[int] = []
    step_block: list[int] = []
    block_rows: list[int] = []  # per block of identical rows: how many rows, items per row
    block_items: list[int] = []
    while present:
        r = max_len
        steps: list[list[int]] = []  # [length, copies] in placement order (a length may come back later)
        per_row: dict[int, int] = {}  # length -> copies in this row
        while present:
            if count[r]:
                s = r
            else:
                m, big = present[0], present[-1]
                i = bisect_right(present, r - m) - 1
                while i >= 0:  # look-ahead: leftover x fillable by j lengths in [m, big]: j*m <= x <= j*big
                    x = r - present[i]
                    j = -(-x // big)
                    if j * m <= x:
                        break
                    i = bisect_right(present, r - j * m) - 1  # every leftover in (x, j*m) is as unfillable
                if i < 0:
                    i = bisect_right(present, r) - 1
                    if i < 0:
                        break
                s = present[i]
            if steps and steps[-1][0] == s:
                steps[-1][1] += 1
            else:
                steps.append([s, 1])
            per_row[s] = per_row.get(s, 0) + 1
            count[s] -= 1
            if not count[s]:
                del present[bisect_left(present, s)]
            r -= s
            if not r:
                break
        # The same row again while every length used keeps more than one row's worth: same choices, no depletion.
        again = max(0, min((count[s] - 1) // k for s, k in per_row.items()))
        block = len(block_rows)
        for s, k in steps:  # row j of the block takes its copies of s from first[s] + j * per_row[s] on
            step_k.append(k)
            step_at.append(first[s])
            step_stride.append(per_row[s])
            step_block.append(block)
            first[s] += k
        for s, k in per_row.items():
            count[s] -= again * k
            first[s] += again * k
        block_rows.append(again + 1)
        block_items.append(sum(per_row.values()))

    # Lay the indices out: step i of block b puts k_i items in each of the block's rows, at column col_i; in row
    # j they are order[at_i + j * stride_i + c], c < k_i (stride_i: copies of that length per row).
    rows_b = np.asarray(block_rows, dtype=np.int64)
    width_b = np.asarray(block_items, dtype=np.int64)
    out_at_b = np.concatenate(([0], np.cumsum(rows_b * width_b)[:-1]))
    sb = np.asarray(step_block, dtype=np.int64)
    k = np.asarray(step_k, dtype=np.int64)
    col = np.cumsum(k) - k  # column of each step inside its row: k's running sum, restarted per block
    block_first_step = np.flatnonzero(np.diff(sb, prepend=-1))
    col -= np.repeat(col[block_first_step], np.diff(np.append(block_first_step, sb.size)))
    size = rows_b[sb] * k  # items each step covers
    q = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)  # index inside the step
    kk = np.repeat(k, size)
    pos = np.repeat(out_at_b[sb] + col, size) + (q // kk) * np.repeat(width_b[sb], size) + q % kk
    out = np.empty(n, dtype=np.int64)
    stride = np.repeat(np.asarray(step_stride, dtype=np.int64), size)
    out[pos] = order[np.repeat(np.asarray(step_at, dtype=np.int64), size) + (q // kk) * stride + q % kk]
    row_starts = np.zeros(int(rows_b.sum()) + 1, dtype=np.int64)
    np.cumsum(np.repeat(width_b, rows_b), out=row_starts[1:])
    return out, row_starts


def pack_lengths(lengths: Sequence[int] | np.ndarray, max_len: int) -> list[list[int]]:
    """:func:`fill_rows` as lists: rows of item indices, each row's lengths summing to at most ``max_len``.

    >>> pack_lengths([5, 3, 4, 2, 2], 8)
    [[0, 1], [2, 3, 4]]
    """
    order, starts = fill_rows(lengths, max_len)
    was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small lists: the cyclic GC would rescan them all, twice as slow
    try:
        flat = order.tolist()
        bounds = starts.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    finally:
        if was_enabled:
            gc.enable()
