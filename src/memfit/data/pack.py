"""Packing tokenized examples into rows of at most ``max_len`` tokens, boundary-correct and label-preserving.

Packing concatenates short examples into full rows so that almost no padding is processed. It has two ways
to go silently wrong, and this module guards both:

1. **Attention across boundaries.** Every row carries ``position_ids`` that restart at 0 for each example,
   ``seq_lens`` and ``cu_seqlens`` (flash-attention varlen form, ``[0, l1, l1+l2, ...]``, int32 semantics),
   so the model can keep examples apart (see :mod:`memfit.data.torch.collator` for how transformers 5 uses them).
2. **Labels.** Prompt labels keep their -100 (they are copied, never rebuilt from ``input_ids``), and the
   first label of every example in a row is set to -100, so no example is trained to predict its first
   token from the end of the previous example. Alone, that label is never used either (the causal-LM loss
   shifts labels by one), so the packed loss equals the examples' loss.

Which examples share a row is :func:`memfit.data.binpack.fill_rows` on their lengths (largest fit with
exact fit and a look-ahead). Building the rows costs one pass over the tokens.

Worked example, ``max_len = 8``: A = ``[11, 12, 13]`` with labels ``[-100, -100, 13]`` (a 2-token prompt),
B = ``[21, 22]`` with labels ``[21, 22]``, C = ``[31, 32, 33, 34, 35]`` with labels ``[-100, 32, 33, 34, 35]``.
The lengths 3, 2, 5 fill two rows: C + A (8 tokens) and B. Row 1: ``input_ids [31, 32, 33, 34, 35, 11, 12,
13]``, ``labels [-100, 32, 33, 34, 35, -100, -100, 13]`` (A's first label is -100 anyway, its prompt),
``position_ids [0, 1, 2, 3, 4, 0, 1, 2]``, ``cu_seqlens [0, 5, 8]``. Row 2: ``labels [-100, 22]``: B's 21
would otherwise be learnt from the end of another example in a row. Loss tokens, in and out: 1 + 1 + 4 = 6.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from memfit.data.binpack import fill_rows
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

Overflow = Literal["error", "truncate", "drop", "split"]
OVERFLOW_CHOICES: tuple[str, ...] = ("error", "truncate", "drop", "split")

__all__ = [
    "OVERFLOW_CHOICES",
    "PackResult",
    "PackedRow",
    "Tokenized",
    "example_fields",
    "loss_tokens",
    "pack",
]


class Tokenized(Protocol):
    """Anything with ``input_ids`` and ``labels`` (memfit's ``TokenizedExample``; a dict works too)."""

    input_ids: Sequence[int]
    labels: Sequence[int]


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
    """Pack tokenized examples into rows of at most ``max_len`` tokens (rows filled by
    :func:`memfit.data.binpack.fill_rows`; layout and labels as the module docstring says).

    An example or piece left with no loss token (``labels[1:]`` all -100) is left out and counted in
    ``no_loss_*``; an empty example (0 tokens) has nothing to pack and is counted in ``empty_examples``. Every
    example, token and loss token in and out is in the result (:meth:`PackResult.accounting`).

    Args:
        examples: tokenized examples (objects or dicts with ``input_ids`` and ``labels`` of equal length).
        max_len: the row length in tokens, at least 2.
        overflow: what happens to an example longer than ``max_len``: ``"error"`` (default) raises;
            ``"truncate"`` keeps its first ``max_len`` tokens; ``"drop"`` leaves it out; ``"split"`` cuts it into
            pieces of ``max_len`` tokens (the last shorter), each packed as its own sequence (positions restart,
            so a piece does not see the previous piece, and its first label becomes -100: counted in
            ``split_labels_masked``).
        lines: the line or record number of each example in its file, for error messages.

    Returns:
        The rows and the accounting.

    Raises:
        MemfitError: an unknown ``overflow``, ``max_len < 2``, ``input_ids`` and ``labels`` of different lengths,
            or (``overflow="error"``) an example longer than ``max_len``, named with its line and the flags.

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

    order, starts = fill_rows(item_len, max_len)
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
