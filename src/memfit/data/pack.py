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

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memfit.data.binpack import fill_rows
from memfit.data.packed import (
    OVERFLOW_CHOICES,
    Overflow,
    PackedRow,
    PackResult,
    RowArrays,
    Tokenized,
    example_fields,
    loss_tokens,
)
from memfit.data.pieces import FileStore, MemoryStore, PiecePlan, build_rows, flatten_examples
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

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
    plan = PiecePlan(max_len, overflow)
    fields = [example_fields(e) for e in examples]
    for i, (ids, labels) in enumerate(fields):
        if len(ids) != len(labels):
            raise MemfitError(
                f"example {i} has {len(ids):,} input_ids but {len(labels):,} labels: they must be the same length"
            )
    store = MemoryStore(fields)
    plan.add(store.lengths, store.labels != IGNORE_INDEX, lines=lines, complete=True)
    order, starts = fill_rows(plan.piece_len, max_len)
    rows = tuple(row.to_packed_row() for row in build_rows(store, plan, order, starts))
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
    plan = PiecePlan(max_len, overflow)
    with FileStore(scratch) as store:
        for batch in batches:
            ids, carries, lengths = flatten_examples(batch.examples)
            plan.add(lengths, carries, lines=batch.lines, complete=False, first=store.count)
            store.append(ids, carries, lengths)
        order, starts = fill_rows(plan.piece_len, max_len)
        n_rows = int(starts.size - 1)
        if on_progress is not None:
            on_progress("writing", 0, n_rows)
        for r, row in enumerate(build_rows(store, plan, order, starts), start=1):
            write_row(row)
            if on_progress is not None and (r % 256 == 0 or r == n_rows):
                on_progress("writing", r, n_rows)
    return plan.result(rows=(), n_rows=n_rows)
