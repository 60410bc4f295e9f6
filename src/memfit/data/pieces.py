"""How :mod:`memfit.data.pack` decides and builds rows: :class:`PiecePlan` (which pieces of which examples go
into rows, under the overflow policy, with every counter of the accounting), the token stores pass 2 reads the
pieces from (:class:`MemoryStore` for :func:`~memfit.data.pack.pack`, :class:`FileStore`, a scratch file, for
:func:`~memfit.data.pack.pack_stream`), and :func:`build_rows`, which lays each row out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memfit.data.packed import OVERFLOW_CHOICES, PackedRow, PackResult, RowArrays, example_fields
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

__all__ = ["CARRY", "FileStore", "MemoryStore", "PiecePlan", "build_rows", "flatten_examples"]


class PiecePlan:
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


def flatten_examples(examples: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch end to end: token ids (int64), "label carries loss" (bool), and each example's length."""
    from itertools import chain

    fields = [example_fields(e) for e in examples]
    lengths = np.fromiter((len(ids) for ids, _ in fields), dtype=np.int64, count=len(fields))
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(i for i, _ in fields), dtype=np.int64, count=total)
    labels = np.fromiter(chain.from_iterable(lab for _, lab in fields), dtype=np.int64, count=total)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= CARRY):
        raise MemfitError(f"token ids must be in 0..{CARRY - 1:,}, got {int(ids.min()):,}..{int(ids.max()):,}")
    carries = labels != IGNORE_INDEX
    if np.any(carries & (labels != ids)):
        raise MemfitError("a label is neither its token's id nor -100: pack such examples with memfit.data.pack.pack "
                          "(in memory), which copies labels as they are")
    return ids, carries, lengths


CARRY = 2**31  # the top bit of a scratch-file word: this token's label carries loss


class MemoryStore:
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


class FileStore:
    """The token ids of :func:`pack_stream`'s examples in a scratch file: one uint32 a token (the id, plus
    :data:`CARRY` when its label carries loss), removed when the ``with`` block ends, however it ends."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.count = 0
        self._starts: list[np.ndarray] = []
        self._tokens = 0
        self._file: Any = None
        self._path: Path | None = None
        self._all_starts: np.ndarray | None = None

    def __enter__(self) -> FileStore:
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
        ids = (words & np.uint32(CARRY - 1)).astype(np.int64)
        labels = np.where(words >= np.uint32(CARRY), ids, IGNORE_INDEX)
        return ids, labels


def build_rows(store: MemoryStore | FileStore, plan: PiecePlan, order: np.ndarray, starts: np.ndarray
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
