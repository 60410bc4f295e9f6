"""Packing tokenized examples into rows of at most ``max_len`` tokens, boundary-correct and label-preserving.

Packing concatenates short examples into full rows so that almost no padding is processed. It has two ways
to go silently wrong, and this module guards both:

1. **Attention across boundaries.** Every row carries ``position_ids`` that restart at 0 for each example,
   ``seq_lens`` and ``cu_seqlens`` (flash-attention varlen form, ``[0, l1, l1+l2, ...]``, int32 semantics),
   so the model can keep examples apart (see :mod:`memfit.data.collator` for how transformers 5 uses them).
2. **Labels.** Prompt labels keep their -100 (they are copied, never rebuilt from ``input_ids``), and the
   first label of every example in a row is set to -100, so no example is trained to predict its first
   token from the end of the previous example. Alone, that label is never used either (the causal-LM loss
   shifts labels by one), so the packed loss equals the examples' loss.

Rows are formed by row-by-row largest fit with exact fit and a look-ahead (:func:`pack_bfd`, a name kept
from when it was best-fit decreasing): one row at a time, an example that fills the room exactly if there is
one, else the longest example whose leftover room the remaining lengths could still fill, in O(n log n) with
numpy (see :func:`pack_bfd`; >= 99.9% of the lower bound ceil(tokens / max_len) on chat-like and GSM8K-like
lengths, where best-fit decreasing reached 99.3-99.7% on GSM8K-like ones).

Worked example, ``max_len = 8``, lengths ``[5, 3, 4, 2, 2]``: row A has room 8, no example of length 8; the
shortest length is 2, so the longest length <= 8 - 2 whose leftover can be filled: 5 (index 0; leftover 3,
one example of 3); room 3: the 3 fits exactly (index 1). Row B: room 8, longest <= 6 is 4 (index 2, leftover 4
= 2 + 2); room 4: no 4 left, longest <= 2 is 2 (index 3); room 2: exact fit (index 4). Two rows,
``[[0, 1], [2, 3, 4]]``, 16 real tokens in 2 x 8 slots: efficiency 100%, equal to the lower bound
ceil(16 / 8) = 2 rows.
"""

from __future__ import annotations

import gc
import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from memfit.errors import MemfitError

IGNORE_INDEX = -100  # the label value torch's cross_entropy (and transformers' loss) skips
Overflow = Literal["error", "truncate", "drop", "split"]
OVERFLOW_CHOICES: tuple[str, ...] = ("error", "truncate", "drop", "split")

__all__ = [
    "IGNORE_INDEX",
    "OVERFLOW_CHOICES",
    "PackResult",
    "PackedRow",
    "block_mask_bytes",
    "check_out_path",
    "example_fields",
    "loss_tokens",
    "pack",
    "pack_bfd",
    "pack_lengths",
    "write_rows",
]


class Tokenized(Protocol):
    """Anything with ``input_ids`` and ``labels`` (memfit's ``TokenizedExample``; a dict works too)."""

    input_ids: Sequence[int]
    labels: Sequence[int]


# --------------------------------------------------------------------------------------------------------
# Best-fit decreasing on lengths


def pack_bfd(lengths: Sequence[int] | np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Group item indices into rows of total length <= ``max_len`` by row-by-row largest fit with exact fit and
    a look-ahead (the name ``pack_bfd`` is kept for callers; this is no longer textbook best-fit decreasing).

    Returns ``(order, row_starts)`` in CSR form: the items of row ``r`` are
    ``order[row_starts[r]:row_starts[r + 1]]``, in the order they were placed (mostly longest first). Rows are
    numbered in the order they were filled.

    The rule. Rows are filled one at a time, each until nothing more fits. With room ``r`` left in the row and
    ``m``, ``M`` the shortest and longest lengths still unplaced:

    1. **exact fit**: if an item of length ``r`` is left, take it (the row is full);
    2. **look-ahead**: otherwise take the longest item ``s <= r - m`` whose leftover ``x = r - s`` could still be
       filled by some ``j`` of the remaining lengths if they were dense: ``j*m <= x <= j*M`` for some ``j >= 1``
       (equivalently ``ceil(x / M) * m <= x``);
    3. otherwise the longest item ``s <= r`` (the row keeps a gap shorter than ``m``); if none fits, the row is
       closed.

    Items of one length are used in input order. Why not best-fit decreasing: BFD places items longest first
    into whichever row fits best, and on lengths with no short items (GSM8K: none under ~60 tokens) it ends many
    rows with a gap shorter than any item left, 0.3-0.7% above the lower bound ``ceil(sum / max_len)``. Filling
    one row at a time with rule 2 steers every gap to a size that the remaining lengths can close exactly;
    ``bench/bench_pack.py`` measures >= 99.9% of the bound on chat-like and GSM8K-like lengths. Worked example,
    ``max_len = 10``, lengths ``[4, 4, 3, 3, 3, 3]`` (sum 20, bound 2 rows). BFD: 4, 4 share row A (gap 2), the
    3s fill row B to 9 and open row C: 3 rows. Here: row A, room 10, no 10; ``m, M = 3, 4``; the longest
    ``s <= 7`` is 4, leftover 6 = 2 x 3 is fillable: take 4 (item 0); room 6: no 6, longest ``s <= 3`` is 3,
    leftover 3 fillable: take item 2; room 3: exact fit, item 3. Row B the same with items 1, 4, 5: 2 rows.

    How it is fast: lengths are integers in ``[1, max_len]``, so the unplaced items are a histogram (count per
    length) with a sorted list of the lengths still present; "longest length <= x" is one bisection (O(log
    max_len)). A row is worked out item by item, as ``(length, copies)`` steps; then, while every length it used
    still has more than one row's worth of copies left, the next row would see the same lengths present and
    make the same choices, so the row is repeated ``min((count_left - 1) // copies)`` more times at once. The
    Python work is per distinct row, not per item (a few thousand rows for 1,000,000 GSM8K-like lengths), and
    the indices are laid out with a handful of numpy passes. Cost: a stable sort (radix for
    ``max_len < 65536``) plus O(distinct rows x items per row x log max_len).

    >>> order, starts = pack_bfd([4, 4, 3, 3, 3, 3], 10)
    >>> [order[starts[r]:starts[r + 1]].tolist() for r in range(len(starts) - 1)]
    [[0, 2, 3], [1, 4, 5]]
    >>> order, starts = pack_bfd([5, 3, 4, 2, 2], 8)
    >>> [order[starts[r]:starts[r + 1]].tolist() for r in range(len(starts) - 1)]
    [[0, 1], [2, 3, 4]]
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
    """:func:`pack_bfd` as lists: rows of item indices, each row's lengths summing to at most ``max_len``.

    >>> pack_lengths([5, 3, 4, 2, 2], 8)
    [[0, 1], [2, 3, 4]]
    """
    order, starts = pack_bfd(lengths, max_len)
    was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small lists: the cyclic GC would rescan them all, twice as slow
    try:
        flat = order.tolist()
        bounds = starts.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    finally:
        if was_enabled:
            gc.enable()


# --------------------------------------------------------------------------------------------------------
# Packed rows


@dataclass(frozen=True, kw_only=True, slots=True)
class PackedRow:
    """One packed row. All per-token lists have the same length (the row's real tokens, no padding).

    ``seq_lens[j]`` tokens of example ``example_ids[j]``, starting at its token ``example_offsets[j]`` (0 unless
    the example was split), sit at ``cu_seqlens[j]:cu_seqlens[j + 1]``; ``position_ids`` restart at 0 there and
    ``labels[cu_seqlens[j]]`` is -100.
    """

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int]
    seq_lens: list[int]
    cu_seqlens: list[int]
    example_ids: list[int]
    example_offsets: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    def to_dict(self) -> dict[str, list[int]]:
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "seq_lens": self.seq_lens,
            "cu_seqlens": self.cu_seqlens,
            "example_ids": self.example_ids,
            "example_offsets": self.example_offsets,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PackResult:
    """Packed rows and the accounting of every example, token and loss token, in and out.

    ``tokens`` are the real tokens in the rows. ``efficiency = tokens / (rows * max_len)``; the lower bound on
    rows is ``ceil(tokens / max_len)`` and ``bound_ratio = lower_bound_rows / rows`` (1.0 = optimal).

    Loss tokens are the tokens a causal LM trains on (``labels[1:] != -100``: the shift drops label 0).
    ``loss_tokens_in`` counts them in the whole examples as given, alone; ``loss_tokens_out`` in the rows.
    Nothing goes missing between them: every example, token and loss token that is not in the rows is counted
    under the reason it left (:meth:`accounting`)::

        examples     = packed_examples + empty_examples + dropped_examples + no_loss_examples
        tokens_in    = tokens + truncated_tokens + dropped_tokens + no_loss_tokens
        loss_tokens_in = loss_tokens_out + truncated_loss_tokens + dropped_loss_tokens + split_labels_masked

    ``truncated_*``: ``--overflow truncate`` cut the tail past ``max_len``; ``dropped_*``: ``--overflow drop``
    left out an example longer than ``max_len``; ``split_labels_masked``: a split piece's first label, which
    the whole example trained on and the piece cannot (its first label becomes -100); ``no_loss_*``: an
    example (or split piece) with no loss token left (a prompt longer than ``max_len`` that truncation
    leaves without its completion, a piece of a split prompt, an example whose labels are all -100) trains
    nothing and is left out rather than packed as dead weight. ``no_loss_examples`` counts examples left with
    nothing in the rows for that reason, ``no_loss_pieces`` the split pieces left out.
    """

    rows: tuple[PackedRow, ...]
    max_len: int
    overflow: str
    examples: int
    empty_examples: int
    packed_examples: int
    tokens_in: int
    tokens: int
    truncated_examples: int
    truncated_tokens: int
    truncated_loss_tokens: int
    dropped_examples: int
    dropped_tokens: int
    dropped_loss_tokens: int
    split_examples: int
    split_pieces: int
    split_labels_masked: int
    no_loss_examples: int
    no_loss_pieces: int
    no_loss_tokens: int
    loss_tokens_in: int
    loss_tokens_out: int

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def lower_bound_rows(self) -> int:
        return math.ceil(self.tokens / self.max_len)

    @property
    def efficiency(self) -> float:
        return self.tokens / (self.n_rows * self.max_len) if self.rows else 0.0

    @property
    def bound_ratio(self) -> float:
        return self.lower_bound_rows / self.n_rows if self.rows else 1.0

    @property
    def padding_tokens(self) -> int:
        """Padding if every row were padded to ``max_len``."""
        return self.n_rows * self.max_len - self.tokens

    @property
    def examples_per_row(self) -> float:
        return self.packed_examples / self.n_rows if self.rows else 0.0

    def accounting(self) -> dict[str, dict[str, int]]:
        """Examples, tokens and loss tokens in, out, and each reason for the difference (class docstring).

        ``in == out + the sum of the other entries`` for each of the three.
        """
        return {
            "examples": {"in": self.examples, "out": self.packed_examples, "empty": self.empty_examples,
                         "dropped_too_long": self.dropped_examples, "no_loss_token": self.no_loss_examples},
            "tokens": {"in": self.tokens_in, "out": self.tokens, "truncated": self.truncated_tokens,
                       "dropped_too_long": self.dropped_tokens, "no_loss_token": self.no_loss_tokens},
            "loss_tokens": {"in": self.loss_tokens_in, "out": self.loss_tokens_out,
                            "truncated": self.truncated_loss_tokens, "dropped_too_long": self.dropped_loss_tokens,
                            "split_first_label_masked": self.split_labels_masked},
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.n_rows,
            "max_len": self.max_len,
            "overflow": self.overflow,
            "examples": self.examples,
            "empty_examples": self.empty_examples,
            "packed_examples": self.packed_examples,
            "examples_per_row": self.examples_per_row,
            "tokens_in": self.tokens_in,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "lower_bound_rows": self.lower_bound_rows,
            "bound_ratio": self.bound_ratio,
            "truncated_examples": self.truncated_examples,
            "truncated_tokens": self.truncated_tokens,
            "truncated_loss_tokens": self.truncated_loss_tokens,
            "dropped_examples": self.dropped_examples,
            "dropped_tokens": self.dropped_tokens,
            "dropped_loss_tokens": self.dropped_loss_tokens,
            "split_examples": self.split_examples,
            "split_pieces": self.split_pieces,
            "split_labels_masked": self.split_labels_masked,
            "no_loss_examples": self.no_loss_examples,
            "no_loss_pieces": self.no_loss_pieces,
            "no_loss_tokens": self.no_loss_tokens,
            "loss_tokens_in": self.loss_tokens_in,
            "loss_tokens_out": self.loss_tokens_out,
            "accounting": self.accounting(),
        }

    def breakdown(self) -> dict[str, int]:
        """Where every input token went: ``packed + truncated + dropped + no_loss == input``."""
        return {
            "tokens/input": self.tokens_in,
            "tokens/packed": self.tokens,
            "tokens/truncated": self.truncated_tokens,
            "tokens/dropped": self.dropped_tokens,
            "tokens/no_loss": self.no_loss_tokens,
            "loss_tokens/input": self.loss_tokens_in,
            "loss_tokens/packed": self.loss_tokens_out,
            "loss_tokens/truncated": self.truncated_loss_tokens,
            "loss_tokens/dropped": self.dropped_loss_tokens,
            "loss_tokens/split_first_label_masked": self.split_labels_masked,
            "slots/rows_x_max_len": self.n_rows * self.max_len,
            "slots/padding": self.padding_tokens,
        }


def example_fields(example: Tokenized | Mapping[str, Sequence[int]]) -> tuple[Sequence[int], Sequence[int]]:
    """``(input_ids, labels)`` of a tokenized example object or dict."""
    if isinstance(example, Mapping):
        return example["input_ids"], example["labels"]
    return example.input_ids, example.labels


def loss_tokens(labels: Sequence[int]) -> int:
    """Tokens a causal LM trains on for one sequence: ``labels[1:] != -100`` (the shift drops label 0)."""
    return sum(1 for t in labels[1:] if t != IGNORE_INDEX)


def pack(
    examples: Sequence[Tokenized] | Sequence[Mapping[str, Sequence[int]]],
    max_len: int,
    *,
    overflow: Overflow | str = "error",
    lines: Sequence[int] | None = None,
) -> PackResult:
    """Pack tokenized examples into rows of at most ``max_len`` tokens (row-filling rule of :func:`pack_bfd`).

    ``overflow`` says what happens to an example longer than ``max_len``: ``"error"`` (default) raises a
    :class:`MemfitError` naming the example, its length and the flags; ``"truncate"`` keeps its first
    ``max_len`` tokens; ``"drop"`` leaves it out; ``"split"`` cuts it into pieces of ``max_len`` tokens (the
    last shorter), each packed as its own sequence (positions restart, so a piece does not see the previous
    piece, and its first label becomes -100: counted in ``split_labels_masked``). An example or piece left
    with no loss token (``labels[1:]`` all -100) is left out and counted in ``no_loss_*``. Empty examples (0
    tokens) have nothing to pack and are counted in ``empty_examples``. Every example, token and loss token
    in and out is in the result (:meth:`PackResult.accounting`). ``lines`` (the line or record number of each
    example in its file) makes error messages name it.

    Worked example, ``max_len = 4``, ``overflow="truncate"``: ``A`` = 6 tokens, labels ``[-, -, -, -, 5, 6]``
    (a 4-token prompt); ``B`` = 3 tokens, labels ``[-, 2, 3]``. In: 2 examples, 9 tokens, 2 + 2 = 4 loss
    tokens. Truncation keeps ``A[:4]`` (cut: 2 tokens, 2 loss tokens), which has no loss token left, so it is
    left out (1 example, 4 tokens). Out: 1 example, 3 tokens, 2 loss tokens: 9 = 3 + 2 + 4, 4 = 2 + 2.

    >>> ex = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"input_ids": [4, 5], "labels": [4, 5]}]
    >>> row = pack(ex, 8).rows[0]
    >>> row.input_ids, row.labels, row.position_ids, row.cu_seqlens
    ([1, 2, 3, 4, 5], [-100, 2, 3, -100, 5], [0, 1, 2, 0, 1], [0, 3, 5])
    """
    if overflow not in OVERFLOW_CHOICES:
        raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
    if max_len < 2:
        raise MemfitError(f"--seq-len must be an integer of at least 2 tokens, got {max_len}: a causal LM learns "
                          "each token from the ones before it, so a row of 1 token carries no loss")
    fields = [example_fields(e) for e in examples]
    for i, (ids, labels) in enumerate(fields):
        if len(ids) != len(labels):
            raise MemfitError(
                f"example {i} has {len(ids):,} input_ids but {len(labels):,} labels: they must be the same length"
            )
    lengths = np.fromiter((len(ids) for ids, _ in fields), dtype=np.int64, count=len(fields))
    over = np.flatnonzero(lengths > max_len)
    if over.size and overflow == "error":
        i = int(over[0])
        where = f" (line {lines[i]})" if lines is not None and i < len(lines) else ""
        raise MemfitError(
            f"example {i}{where} has {int(lengths[i]):,} tokens, more than --seq-len {max_len:,} "
            f"({over.size:,} example{'s are' if over.size > 1 else ' is'} longer): raise --seq-len or pass "
            "--overflow truncate|drop|split"
        )
    # Pieces to pack: (example, offset, length). Each piece trains on its labels[1:].
    item_example: list[int] = []
    item_offset: list[int] = []
    item_len: list[int] = []
    truncated_examples = truncated_tokens = truncated_loss = 0
    dropped_examples = dropped_tokens = dropped_loss = 0
    split_examples = split_pieces = split_masked = 0
    no_loss_examples = no_loss_pieces = no_loss_tokens = 0
    empty = loss_in = 0

    def live(labels: Sequence[int], a: int, b: int) -> int:  # loss tokens of the piece labels[a:b] alone
        return sum(1 for t in labels[a + 1 : b] if t != IGNORE_INDEX)

    for i, n in enumerate(lengths.tolist()):
        if n == 0:
            empty += 1
            continue
        labels = fields[i][1]
        whole = live(labels, 0, n)
        loss_in += whole
        if n <= max_len or overflow == "truncate":
            keep = min(n, max_len)
            kept = whole if keep == n else live(labels, 0, keep)
            if keep < n:
                truncated_examples += 1
                truncated_tokens += n - keep
                truncated_loss += whole - kept
            if kept == 0:
                no_loss_examples += 1
                no_loss_tokens += keep
                continue
            item_example.append(i)
            item_offset.append(0)
            item_len.append(keep)
        elif overflow == "drop":
            dropped_examples += 1
            dropped_tokens += n
            dropped_loss += whole
        else:  # split
            split_examples += 1
            placed = 0
            for off in range(0, n, max_len):
                end = min(n, off + max_len)
                split_pieces += 1
                if off and labels[off] != IGNORE_INDEX:
                    split_masked += 1  # in the whole example this label was trained on; the piece cannot keep it
                if live(labels, off, end) == 0:
                    no_loss_pieces += 1
                    no_loss_tokens += end - off
                    continue
                placed += 1
                item_example.append(i)
                item_offset.append(off)
                item_len.append(end - off)
            if not placed:
                no_loss_examples += 1

    order, starts = pack_bfd(item_len, max_len)
    rows: list[PackedRow] = []
    loss_out = 0
    flat = order.tolist()
    bounds = starts.tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        input_ids: list[int] = []
        labels_row: list[int] = []
        position_ids: list[int] = []
        seq_lens: list[int] = []
        cu = [0]
        ex_ids: list[int] = []
        ex_offs: list[int] = []
        for item in flat[a:b]:
            e, off, n = item_example[item], item_offset[item], item_len[item]
            ids, labs = fields[e]
            piece_labels = list(labs[off : off + n])
            piece_labels[0] = IGNORE_INDEX
            input_ids.extend(ids[off : off + n])
            labels_row.extend(piece_labels)
            position_ids.extend(range(n))
            seq_lens.append(n)
            cu.append(cu[-1] + n)
            ex_ids.append(e)
            ex_offs.append(off)
        loss_out += loss_tokens(labels_row)
        rows.append(
            PackedRow(
                input_ids=input_ids,
                labels=labels_row,
                position_ids=position_ids,
                seq_lens=seq_lens,
                cu_seqlens=cu,
                example_ids=ex_ids,
                example_offsets=ex_offs,
            )
        )
    return PackResult(
        rows=tuple(rows),
        max_len=max_len,
        overflow=str(overflow),
        examples=len(fields),
        empty_examples=empty,
        packed_examples=len(set(item_example)),
        tokens_in=int(lengths.sum()),
        tokens=int(sum(item_len)),
        truncated_examples=truncated_examples,
        truncated_tokens=truncated_tokens,
        truncated_loss_tokens=truncated_loss,
        dropped_examples=dropped_examples,
        dropped_tokens=dropped_tokens,
        dropped_loss_tokens=dropped_loss,
        split_examples=split_examples,
        split_pieces=split_pieces,
        split_labels_masked=split_masked,
        no_loss_examples=no_loss_examples,
        no_loss_pieces=no_loss_pieces,
        no_loss_tokens=no_loss_tokens,
        loss_tokens_in=loss_in,
        loss_tokens_out=loss_out,
    )


def block_mask_bytes(batch: int, seq_len: int, dtype_bytes: int = 4) -> int:
    """Bytes of a materialised additive block-diagonal mask, shape ``(batch, 1, seq_len, seq_len)``.

    ``B * 1 * L * L * dtype_bytes``; worked example: batch 4, L = 4096, fp32 (4 bytes):
    4 * 4096 * 4096 * 4 = 268,435,456 bytes = 256 MiB, held for the whole forward and backward. The
    position-ids form (:class:`memfit.data.collator.PackedCollator` with ``attention="position_ids"``) with
    flash attention needs none; sdpa and eager build a boolean or float mask of this shape internally anyway
    (transformers' ``create_causal_mask``), so count it once per step either way.

    >>> block_mask_bytes(4, 4096, 4)
    268435456
    """
    if batch < 0 or seq_len < 0 or dtype_bytes < 1:
        raise MemfitError("block mask size needs batch >= 0, seq_len >= 0 and dtype_bytes >= 1")
    return batch * 1 * seq_len * seq_len * dtype_bytes


def check_out_path(path: str | Path) -> Path:
    """Check before any work that packed rows can be written to ``path``: ``.jsonl`` or ``.parquet``, not a
    directory, in an existing folder that accepts a new file (probed with a temporary file there, removed at
    once: permission bits say nothing for root, and ``/proc`` or ``/sys`` refuse files whatever they say).
    Returns the path; raises a MemfitError naming the fix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise MemfitError(f"--out must end in .jsonl or .parquet, not {p.name!r}")
    if p.is_dir():
        raise MemfitError(f"--out {p} is a directory: name a file, e.g. {p / ('rows' + suffix)}")
    if not p.parent.is_dir():
        raise MemfitError(f"--out {p}: the folder {p.parent} does not exist; create it or choose another --out")
    if p.exists() and not p.is_file():
        raise MemfitError(f"--out {p} exists and is not a regular file: choose another --out")
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=".memfit-probe-"):
            pass
    except OSError as exc:
        raise MemfitError(f"--out {p}: cannot write in {p.parent} ({exc.strerror or exc}); choose a folder you "
                          "can write to") from exc
    return p


def write_rows(result: PackResult, path: str | Path) -> int:
    """Write the packed rows to ``path`` (``.jsonl`` or ``.parquet``), one row per line / record, with every
    field of :class:`PackedRow`. Returns the bytes written. A path that cannot be written is a MemfitError
    (:func:`check_out_path`), and a write that fails part way leaves no partial file."""
    p = check_out_path(path)
    existed = p.exists()
    try:
        if p.suffix.lower() == ".jsonl":
            with p.open("w", encoding="utf-8") as f:
                for row in result.rows:
                    f.write(json.dumps(row.to_dict(), separators=(",", ":")) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            names = list(PackedRow.__slots__)  # every field is a list of int32 (token ids < 2**31)
            table = pa.table({name: pa.array([getattr(r, name) for r in result.rows], type=pa.list_(pa.int32()))
                              for name in names})
            try:
                pq.write_table(table, p)
            except pa.ArrowException as exc:  # pyarrow's own I/O errors (most are OSError subclasses too)
                raise OSError(str(exc)) from exc
        return p.stat().st_size
    except OSError as exc:
        if not existed:
            p.unlink(missing_ok=True)
        raise MemfitError(f"cannot write the rows to {p}: {exc}") from exc
