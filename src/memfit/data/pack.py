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
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
    "RowArrays",
    "Tokenized",
    "example_fields",
    "loss_tokens",
    "pack",
    "pack_stream",
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

    ``rows`` holds the rows of :func:`pack`; :func:`pack_stream` writes them out as it builds them and leaves
    ``rows`` empty (``n_rows`` counts them either way).
    """

    rows: tuple[PackedRow, ...]
    n_rows: int
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
    def lower_bound_rows(self) -> int:
        return math.ceil(self.tokens / self.max_len)

    @property
    def efficiency(self) -> float:
        return self.tokens / (self.n_rows * self.max_len) if self.n_rows else 0.0

    @property
    def bound_ratio(self) -> float:
        return self.lower_bound_rows / self.n_rows if self.n_rows else 1.0

    @property
    def padding_tokens(self) -> int:
        """Padding if every row were padded to ``max_len``."""
        return self.n_rows * self.max_len - self.tokens

    @property
    def examples_per_row(self) -> float:
        return self.packed_examples / self.n_rows if self.n_rows else 0.0

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
    plan = _Plan(max_len, overflow)
    fields = [example_fields(e) for e in examples]
    for i, (ids, labels) in enumerate(fields):
        if len(ids) != len(labels):
            raise MemfitError(
                f"example {i} has {len(ids):,} input_ids but {len(labels):,} labels: they must be the same length"
            )
    store = _MemoryStore(fields)
    plan.add(store.lengths, store.labels != IGNORE_INDEX, lines=lines, complete=True)
    order, starts = fill_rows(plan.piece_len, max_len)
    rows = tuple(row.to_packed_row() for row in _row_arrays(store, plan, order, starts))
    return plan.result(rows=rows, n_rows=len(rows))


def pack_stream(
    batches: Iterable[Any],
    max_len: int,
    *,
    overflow: Overflow | str = "error",
    write_row: Callable[[RowArrays], None],
    scratch: str | Path,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> PackResult:
    """:func:`pack` for a data set that does not fit in memory: the same rows, written out one by one.

    Two passes, and the second reads no data file: pass 1 consumes ``batches`` (``TokenizedBatch``-like:
    ``lines`` and ``examples``, as :func:`memfit.data.tokenize.iter_tokenized` yields them), decides every
    example's pieces and the accounting as :func:`pack` does, and appends the token ids to a scratch file in the
    folder ``scratch`` (4 bytes a token: the id in the low 31 bits, "carries loss" in the top bit; labels from a
    tokenizer are the id or -100, nothing else). Then :func:`~memfit.data.binpack.fill_rows` places the pieces,
    which needs every length first, and pass 2 builds each row from the scratch file (``os.pread`` of its
    pieces: read, not mapped, so the pages are the kernel's cache and not this process's memory) and hands it
    to ``write_row``. The scratch file is removed at the end, also on an error or an interrupt.

    Why a scratch file and not a second tokenisation: tokenising is the slow part (about 6,000 GSM8K examples
    a second on 2 cores, ``bench/RESULTS.md``), and the rows mix examples from all over the file, so pass 2
    would need random access to tokenised examples anyway. The scratch file is smaller than the rows written
    from it (which carry ids, labels and positions), so where the output fits, it fits. Memory is the per-example
    bookkeeping (about 40 bytes an example) plus one batch and one row.

    ``on_progress(phase, done, total)`` is called with ``"packing"`` after the pieces are placed and with
    ``"writing"`` as rows are written (done rows of total).
    """
    plan = _Plan(max_len, overflow)
    with _FileStore(scratch) as store:
        for batch in batches:
            ids, carries, lengths = _flatten(batch.examples)
            plan.add(lengths, carries, lines=batch.lines, complete=False, first=store.count)
            store.append(ids, carries, lengths)
        order, starts = fill_rows(plan.piece_len, max_len)
        n_rows = int(starts.size - 1)
        if on_progress is not None:
            on_progress("writing", 0, n_rows)
        for r, row in enumerate(_row_arrays(store, plan, order, starts), start=1):
            write_row(row)
            if on_progress is not None and (r % 256 == 0 or r == n_rows):
                on_progress("writing", r, n_rows)
    return plan.result(rows=(), n_rows=n_rows)


# ---------------------------------------------------------------------------------------------------
# Planning: which pieces of which examples go into rows, and the accounting (shared by pack and pack_stream).


class _Plan:
    """The pieces to pack (example, offset, length), decided batch by batch, and every counter of
    :class:`PackResult`. Examples up to ``max_len`` are decided for a whole batch at once with numpy; longer
    ones (rare) one by one under the overflow policy."""

    def __init__(self, max_len: int, overflow: str) -> None:
        if overflow not in OVERFLOW_CHOICES:
            raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
        if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer) or max_len < 2:
            raise MemfitError(f"--seq-len must be an integer of at least 2 tokens, got {max_len}: a causal LM "
                              "learns each token from the ones before it, so a row of 1 token carries no loss")
        self.max_len = int(max_len)
        self.overflow = overflow
        self.examples = self.empty = self.tokens_in = self.loss_in = self.loss_out = 0
        self.truncated_examples = self.truncated_tokens = self.truncated_loss = 0
        self.dropped_examples = self.dropped_tokens = self.dropped_loss = 0
        self.split_examples = self.split_pieces = self.split_masked = 0
        self.no_loss_examples = self.no_loss_pieces = self.no_loss_tokens = 0
        self._ex: list[np.ndarray] = []
        self._off: list[np.ndarray] = []
        self._len: list[np.ndarray] = []
        self._joined: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add(self, lengths: np.ndarray, carries: np.ndarray, *, lines: Sequence[int] | None, complete: bool,
            first: int = 0) -> None:
        """Decide the examples ``first, first + 1, ...`` of ``lengths`` tokens, whose labels, end to end, carry
        loss where ``carries`` is true (``label != -100``)."""
        n = np.asarray(lengths, dtype=np.int64)
        k = int(n.size)
        self.examples += k
        if not k:
            return
        ends = np.cumsum(n)
        starts = ends - n
        csum = np.concatenate(([0], np.cumsum(carries, dtype=np.int64)))
        whole = csum[ends] - csum[np.minimum(starts + 1, ends)]  # labels[1:] that carry loss, each alone
        self.tokens_in += int(ends[-1])
        self.loss_in += int(whole.sum())
        self.empty += int((n == 0).sum())
        over = n > self.max_len
        if over.any() and self.overflow == "error":
            i = int(np.argmax(over))
            where = f" (line {lines[i]})" if lines is not None and i < len(lines) else ""
            more = int(over.sum())
            count = f" ({more:,} example{'s are' if more > 1 else ' is'} longer)" if complete else ""
            raise MemfitError(
                f"example {first + i}{where} has {int(n[i]):,} tokens, more than --seq-len {self.max_len:,}{count}: "
                "raise --seq-len or pass --overflow truncate|drop|split"
            )
        fits = (n > 0) & ~over
        dead = fits & (whole == 0)
        self.no_loss_examples += int(dead.sum())
        self.no_loss_tokens += int(n[dead].sum())
        alive = np.flatnonzero(fits & (whole > 0))
        ex = [alive + first]
        off = [np.zeros(alive.size, dtype=np.int64)]
        ln = [n[alive]]
        self.loss_out += int(whole[alive].sum())
        long_ex: list[int] = []
        long_off: list[int] = []
        long_len: list[int] = []

        def live(a: int, b: int) -> int:  # loss tokens of the piece [a, b) of the batch's tokens, alone
            return int(csum[b] - csum[min(a + 1, b)])

        for i in np.flatnonzero(over).tolist():
            s, size, total = int(starts[i]), int(n[i]), int(whole[i])
            if self.overflow == "truncate":
                kept = live(s, s + self.max_len)
                self.truncated_examples += 1
                self.truncated_tokens += size - self.max_len
                self.truncated_loss += total - kept
                if kept == 0:
                    self.no_loss_examples += 1
                    self.no_loss_tokens += self.max_len
                    continue
                long_ex.append(first + i)
                long_off.append(0)
                long_len.append(self.max_len)
                self.loss_out += kept
            elif self.overflow == "drop":
                self.dropped_examples += 1
                self.dropped_tokens += size
                self.dropped_loss += total
            else:  # split
                self.split_examples += 1
                placed = 0
                for o in range(0, size, self.max_len):
                    e = min(size, o + self.max_len)
                    self.split_pieces += 1
                    if o and carries[s + o]:
                        self.split_masked += 1  # the whole example trained on this label; the piece cannot
                    got = live(s + o, s + e)
                    if got == 0:
                        self.no_loss_pieces += 1
                        self.no_loss_tokens += e - o
                        continue
                    placed += 1
                    long_ex.append(first + i)
                    long_off.append(o)
                    long_len.append(e - o)
                    self.loss_out += got
                if not placed:
                    self.no_loss_examples += 1
        if long_ex:  # back into example order, as one pass over the examples would have them
            ex.append(np.asarray(long_ex, dtype=np.int64))
            off.append(np.asarray(long_off, dtype=np.int64))
            ln.append(np.asarray(long_len, dtype=np.int64))
            e_all, o_all, l_all = np.concatenate(ex), np.concatenate(off), np.concatenate(ln)
            keys = np.lexsort((o_all, e_all))
            ex, off, ln = [e_all[keys]], [o_all[keys]], [l_all[keys]]
        self._ex += ex
        self._off += off
        self._len += ln
        self._joined = None

    def _pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._joined is None:
            def cat(parts: list[np.ndarray]) -> np.ndarray:
                return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

            self._joined = (cat(self._ex), cat(self._off), cat(self._len))
            self._ex, self._off, self._len = [self._joined[0]], [self._joined[1]], [self._joined[2]]
        return self._joined

    @property
    def piece_example(self) -> np.ndarray:
        return self._pieces()[0]

    @property
    def piece_offset(self) -> np.ndarray:
        return self._pieces()[1]

    @property
    def piece_len(self) -> np.ndarray:
        return self._pieces()[2]

    def result(self, *, rows: tuple[PackedRow, ...], n_rows: int) -> PackResult:
        ex, _, ln = self._pieces()
        return PackResult(
            rows=rows,
            n_rows=n_rows,
            max_len=self.max_len,
            overflow=str(self.overflow),
            examples=self.examples,
            empty_examples=self.empty,
            packed_examples=int(np.unique(ex).size),
            tokens_in=self.tokens_in,
            tokens=int(ln.sum()),
            truncated_examples=self.truncated_examples,
            truncated_tokens=self.truncated_tokens,
            truncated_loss_tokens=self.truncated_loss,
            dropped_examples=self.dropped_examples,
            dropped_tokens=self.dropped_tokens,
            dropped_loss_tokens=self.dropped_loss,
            split_examples=self.split_examples,
            split_pieces=self.split_pieces,
            split_labels_masked=self.split_masked,
            no_loss_examples=self.no_loss_examples,
            no_loss_pieces=self.no_loss_pieces,
            no_loss_tokens=self.no_loss_tokens,
            loss_tokens_in=self.loss_in,
            loss_tokens_out=self.loss_out,
        )


# ---------------------------------------------------------------------------------------------------
# Token stores (where pass 2 reads the pieces from) and row building.


@dataclass(frozen=True, slots=True)
class RowArrays:
    """One packed row as numpy arrays (what a writer turns into a line or a record); the same fields as
    :class:`PackedRow`."""

    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    seq_lens: np.ndarray
    cu_seqlens: np.ndarray
    example_ids: np.ndarray
    example_offsets: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in PackedRow.__slots__}

    def to_packed_row(self) -> PackedRow:
        return PackedRow(**{name: values.tolist() for name, values in self.columns().items()})


def _flatten(examples: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch end to end: token ids (int64), "label carries loss" (bool), and each example's length."""
    from itertools import chain

    fields = [example_fields(e) for e in examples]
    lengths = np.fromiter((len(ids) for ids, _ in fields), dtype=np.int64, count=len(fields))
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(i for i, _ in fields), dtype=np.int64, count=total)
    labels = np.fromiter(chain.from_iterable(lab for _, lab in fields), dtype=np.int64, count=total)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= _CARRY):
        raise MemfitError(f"token ids must be in 0..{_CARRY - 1:,}, got {int(ids.min()):,}..{int(ids.max()):,}")
    carries = labels != IGNORE_INDEX
    if np.any(carries & (labels != ids)):
        raise MemfitError("a label is neither its token's id nor -100: pack such examples with memfit.data.pack.pack "
                          "(in memory), which copies labels as they are")
    return ids, carries, lengths


_CARRY = 2**31  # the top bit of a scratch-file word: this token's label carries loss


class _MemoryStore:
    """The examples of :func:`pack`, end to end in two int64 arrays (labels kept exactly as given)."""

    def __init__(self, fields: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        from itertools import chain

        self.lengths = np.fromiter((len(ids) for ids, _ in fields), dtype=np.int64, count=len(fields))
        total = int(self.lengths.sum())
        self.ids = np.fromiter(chain.from_iterable(i for i, _ in fields), dtype=np.int64, count=total)
        self.labels = np.fromiter(chain.from_iterable(lab for _, lab in fields), dtype=np.int64, count=total)
        self.starts = np.cumsum(self.lengths) - self.lengths

    def gather(self, ex: np.ndarray, off: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.concatenate([np.arange(a, a + b) for a, b in zip((self.starts[ex] + off).tolist(), n.tolist(),
                                                                  strict=True)]) if n.size else np.zeros(0, np.int64)
        return self.ids[idx], self.labels[idx].copy()


class _FileStore:
    """The token ids of :func:`pack_stream`'s examples in a scratch file: one uint32 a token (the id, plus
    :data:`_CARRY` when its label carries loss), removed when the ``with`` block ends, however it ends."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.count = 0
        self._starts: list[np.ndarray] = []
        self._tokens = 0
        self._file: Any = None
        self._path: Path | None = None
        self._all_starts: np.ndarray | None = None

    def __enter__(self) -> _FileStore:
        import tempfile

        fd, name = tempfile.mkstemp(prefix=".memfit-pack-tokens-", suffix=".tmp", dir=self.folder)
        self._path = Path(name)
        self._file = os.fdopen(fd, "w+b")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def append(self, ids: np.ndarray, carries: np.ndarray, lengths: np.ndarray) -> None:
        words = ids.astype(np.uint32) | (carries.astype(np.uint32) << np.uint32(31))
        try:
            self._file.write(words.tobytes())
        except OSError as exc:
            raise MemfitError(f"cannot write the scratch file in {self.folder} ({exc.strerror or exc})",
                              hint="free some space there (it takes 4 bytes a token), or --out another folder") \
                from exc
        self._starts.append(self._tokens + np.cumsum(lengths) - lengths)
        self._tokens += int(lengths.sum())
        self.count += int(lengths.size)

    def gather(self, ex: np.ndarray, off: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._all_starts is None:
            self._file.flush()
            self._all_starts = np.concatenate(self._starts) if self._starts else np.zeros(0, np.int64)
            self._starts = [self._all_starts]
        fd = self._file.fileno()
        at = ((self._all_starts[ex] + off) * 4).tolist()
        size = (n * 4).tolist()
        words = np.frombuffer(b"".join(os.pread(fd, b, a) for a, b in zip(at, size, strict=True)), dtype=np.uint32)
        ids = (words & np.uint32(_CARRY - 1)).astype(np.int64)
        labels = np.where(words >= np.uint32(_CARRY), ids, IGNORE_INDEX)
        return ids, labels


def _row_arrays(store: _MemoryStore | _FileStore, plan: _Plan, order: np.ndarray, starts: np.ndarray
                ) -> Iterator[RowArrays]:
    """The rows :func:`~memfit.data.binpack.fill_rows` placed, built from the store: each piece's ids and
    labels, its first label -100, positions restarting at 0 per piece."""
    p_ex, p_off, p_len = plan.piece_example, plan.piece_offset, plan.piece_len
    bounds = starts.tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        items = order[a:b]
        ex, off, n = p_ex[items], p_off[items], p_len[items]
        ids, labels = store.gather(ex, off, n)
        cu = np.concatenate(([0], np.cumsum(n)))
        labels[cu[:-1]] = IGNORE_INDEX
        positions = np.arange(int(cu[-1]), dtype=np.int64) - np.repeat(cu[:-1], n)
        yield RowArrays(input_ids=ids, labels=labels, position_ids=positions, seq_lens=n, cu_seqlens=cu,
                        example_ids=ex, example_offsets=off)
