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
    """Packed rows and the accounting of every example and token.

    ``tokens`` are the real tokens in the rows. ``efficiency = tokens / (rows * max_len)``; the lower bound on
    rows is ``ceil(tokens / max_len)`` and ``bound_ratio = lower_bound_rows / rows`` (1.0 = optimal).
    ``loss_tokens_in`` counts the tokens that carry loss in the examples as a causal LM trains on them
    alone (``labels[1:] != -100``, the shift drops label 0), restricted to the tokens that were kept;
    ``loss_tokens_out`` the same in the packed rows. They are equal unless a split piece lost its first label
    (``split_labels_masked``).
    """

    rows: tuple[PackedRow, ...]
    max_len: int
    overflow: str
    examples: int
    empty_examples: int
    packed_examples: int
    tokens: int
    truncated_examples: int
    truncated_tokens: int
    dropped_examples: int
    dropped_tokens: int
    split_examples: int
    split_pieces: int
    split_labels_masked: int
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.n_rows,
            "max_len": self.max_len,
            "overflow": self.overflow,
            "examples": self.examples,
            "empty_examples": self.empty_examples,
            "packed_examples": self.packed_examples,
            "examples_per_row": self.examples_per_row,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "lower_bound_rows": self.lower_bound_rows,
            "bound_ratio": self.bound_ratio,
            "truncated_examples": self.truncated_examples,
            "truncated_tokens": self.truncated_tokens,
            "dropped_examples": self.dropped_examples,
            "dropped_tokens": self.dropped_tokens,
            "split_examples": self.split_examples,
            "split_pieces": self.split_pieces,
            "split_labels_masked": self.split_labels_masked,
            "loss_tokens_in": self.loss_tokens_in,
            "loss_tokens_out": self.loss_tokens_out,
        }

    def breakdown(self) -> dict[str, int]:
        """Where every input token went: ``packed + truncated + dropped == input``."""
        return {
            "tokens/input": self.tokens + self.truncated_tokens + self.dropped_tokens,
            "tokens/packed": self.tokens,
            "tokens/truncated": self.truncated_tokens,
            "tokens/dropped": self.dropped_tokens,
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
    piece, and its first label becomes -100: counted in ``split_labels_masked``). Each is counted in the
    result. Empty examples (0 tokens) have nothing to pack and are counted in ``empty_examples``.
    ``lines`` (the line or record number of each example in its file) makes error messages name it.

    >>> ex = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"input_ids": [4, 5], "labels": [4, 5]}]
    >>> row = pack(ex, 8).rows[0]
    >>> row.input_ids, row.labels, row.position_ids, row.cu_seqlens
    ([1, 2, 3, 4, 5], [-100, 2, 3, -100, 5], [0, 1, 2, 0, 1], [0, 3, 5])
    """
    if overflow not in OVERFLOW_CHOICES:
        raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
    if max_len < 2:
        raise MemfitError(f"--seq-len must be at least 2 tokens, not {max_len}")
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
    # Pieces to pack: (example, offset, length)
    item_example: list[int] = []
    item_offset: list[int] = []
    item_len: list[int] = []
    truncated_examples = truncated_tokens = dropped_examples = dropped_tokens = 0
    split_examples = split_pieces = 0
    empty = 0
    for i, n in enumerate(lengths.tolist()):
        if n == 0:
            empty += 1
        elif n <= max_len:
            item_example.append(i)
            item_offset.append(0)
            item_len.append(n)
        elif overflow == "truncate":
            truncated_examples += 1
            truncated_tokens += n - max_len
            item_example.append(i)
            item_offset.append(0)
            item_len.append(max_len)
        elif overflow == "drop":
            dropped_examples += 1
            dropped_tokens += n
        else:  # split
            split_examples += 1
            for off in range(0, n, max_len):
                split_pieces += 1
                item_example.append(i)
                item_offset.append(off)
                item_len.append(min(max_len, n - off))

    order, starts = pack_bfd(item_len, max_len)
    rows: list[PackedRow] = []
    loss_in = loss_out = split_masked = 0
    flat = order.tolist()
    bounds = starts.tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        input_ids: list[int] = []
        labels: list[int] = []
        position_ids: list[int] = []
        seq_lens: list[int] = []
        cu = [0]
        ex_ids: list[int] = []
        ex_offs: list[int] = []
        for item in flat[a:b]:
            e, off, n = item_example[item], item_offset[item], item_len[item]
            ids, labs = fields[e]
            piece_labels = list(labs[off : off + n])
            loss_in += sum(1 for t in piece_labels[1:] if t != IGNORE_INDEX)
            if off and piece_labels[0] != IGNORE_INDEX:
                loss_in += 1  # in the whole example this label was trained on; the piece cannot keep it
                split_masked += 1
            piece_labels[0] = IGNORE_INDEX
            input_ids.extend(ids[off : off + n])
            labels.extend(piece_labels)
            position_ids.extend(range(n))
            seq_lens.append(n)
            cu.append(cu[-1] + n)
            ex_ids.append(e)
            ex_offs.append(off)
        loss_out += loss_tokens(labels)
        rows.append(
            PackedRow(
                input_ids=input_ids,
                labels=labels,
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
        packed_examples=len(fields) - empty - dropped_examples,
        tokens=int(sum(item_len)),
        truncated_examples=truncated_examples,
        truncated_tokens=truncated_tokens,
        dropped_examples=dropped_examples,
        dropped_tokens=dropped_tokens,
        split_examples=split_examples,
        split_pieces=split_pieces,
        split_labels_masked=split_masked,
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


def write_rows(result: PackResult, path: str | Path) -> int:
    """Write the packed rows to ``path`` (``.jsonl`` or ``.parquet``), one row per line / record, with every
    field of :class:`PackedRow`. Returns the bytes written."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise MemfitError(f"--out must end in .jsonl or .parquet, not {p.name!r}")
    if not p.parent.exists():
        raise MemfitError(f"the folder {p.parent} does not exist: create it or choose another --out")
    if suffix == ".jsonl":
        with p.open("w", encoding="utf-8") as f:
            for row in result.rows:
                f.write(json.dumps(row.to_dict(), separators=(",", ":")) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(PackedRow.__slots__)  # every field is a list of int32 (token ids < 2**31)
        table = pa.table({name: pa.array([getattr(r, name) for r in result.rows], type=pa.list_(pa.int32()))
                          for name in names})
        pq.write_table(table, p)
    return p.stat().st_size
