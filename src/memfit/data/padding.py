"""Padding waste: the share of processed tokens that are padding, for three ways of forming micro-batches.

A micro-batch of ``B`` examples is padded to its longest member (what ``DataCollatorWithPadding`` /
``DataCollatorForSeq2Seq`` do), so a batch with lengths ``l_1..l_B`` processes ``B * max(l)`` tokens of
which ``sum(l)`` are real. Over the data set::

    waste = 1 - sum(real tokens) / sum(processed tokens)

Lengths are first capped at the sequence length (training truncates there). The strategies:

``random``
    A seeded random permutation cut into consecutive batches of ``B`` (the last may be smaller), as the
    Trainer's default ``RandomSampler`` does.
``grouped``
    transformers' ``group_by_length=True`` (``LengthGroupedSampler``, ``get_length_grouped_indices`` in
    ``transformers/trainer_pt_utils.py``): a random permutation cut into megabatches of
    ``mega_batch_mult * B`` with ``mega_batch_mult = min(n // (4 * B), 50)`` (at least 1), each sorted by
    length, longest first; then the longest example of all is swapped into the first position, so an
    out-of-memory error comes first. Reproduced here exactly (a test checks it against transformers given
    the same permutation).
``packed``
    Rows of ``seq_len`` tokens filled by :func:`memfit.data.binpack.fill_rows` (``memfit pack``'s rule); every
    row is processed at ``seq_len`` (fixed-shape rows), so ``waste = 1 - tokens / (rows * seq_len)``, i.e.
    one minus ``memfit pack``'s efficiency. A packed micro-batch holds as many rows as carry ``B``
    examples on average, ``ceil(B * rows / n)``, so every strategy trains on about the same number of
    examples per step (``BatchPadding.batch`` is that row count; it sets the activation memory).

Cost: a permutation, a sort per megabatch and the packing, O(n log n) in all.

Worked example, ``B = 2``, lengths in batch order ``[10, 2, 7, 7]``: batches (10, 2) and (7, 7) process
``2*10 + 2*7 = 34`` tokens for 26 real ones: waste ``1 - 26/34 = 23.5%``. Packed into rows of 16: row A
takes the 10 (leftover 6, between the shortest and longest lengths left, 2 and 7: fillable) and the 2, then
closes with room 4, less than a 7; row B takes the two 7s. Two rows, 32 slots, waste
``1 - 26/32 = 18.75%``; ``ceil(2 * 2 / 4) = 1`` row per micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memfit.data.binpack import fill_rows
from memfit.errors import MemfitError

__all__ = [
    "STRATEGIES",
    "BatchPadding",
    "PaddingReport",
    "batch_padding",
    "length_grouped_order",
    "padding_report",
]

STRATEGIES: tuple[str, ...] = ("random", "grouped", "packed")
MEGA_BATCH_MULT = 50  # transformers' default cap on megabatch size in units of the batch


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchPadding:
    """Tokens one strategy processes over an epoch, and the padded row lengths it implies.

    ``batch`` is the rows per micro-batch: ``--batch`` examples for random and grouped batches, the packed
    rows that carry that many examples on average for packing.

    ``peak_len`` is the padded length of the longest micro-batch (the step that sets the memory peak);
    ``mean_len`` is the mean padded row length over micro-batches (tokens per row in a typical step).
    """

    strategy: str
    batch: int
    real_tokens: int
    processed_tokens: int
    micro_batches: int
    peak_len: int
    mean_len: float

    @property
    def padding_tokens(self) -> int:
        return self.processed_tokens - self.real_tokens

    @property
    def waste(self) -> float:
        """Share of processed tokens that are padding."""
        return self.padding_tokens / self.processed_tokens if self.processed_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "batch": self.batch, "real_tokens": self.real_tokens,
                "processed_tokens": self.processed_tokens, "padding_tokens": self.padding_tokens,
                "waste": self.waste, "micro_batches": self.micro_batches, "peak_len": self.peak_len,
                "mean_len": self.mean_len}

    def breakdown(self) -> dict[str, int]:
        return {f"{self.strategy}/real": self.real_tokens, f"{self.strategy}/padding": self.padding_tokens,
                f"{self.strategy}/processed": self.processed_tokens}


@dataclass(frozen=True, kw_only=True, slots=True)
class PaddingReport:
    """Padding waste of random, length-grouped and packed batches at one micro-batch and sequence length."""

    batch: int
    seq_len: int
    seed: int
    random: BatchPadding
    grouped: BatchPadding
    packed: BatchPadding

    def strategies(self) -> tuple[BatchPadding, ...]:
        return (self.random, self.grouped, self.packed)

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "seq_len": self.seq_len, "seed": self.seed,
                **{s.strategy: s.to_dict() for s in self.strategies()}}

    def breakdown(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.strategies():
            out.update(s.breakdown())
        return out


def batch_padding(lengths_in_order: Sequence[int] | np.ndarray, batch: int, *,
                  strategy: str = "ordered") -> BatchPadding:
    """Tokens processed when ``lengths_in_order`` is cut into consecutive micro-batches of ``batch``,
    each padded to its longest member.

    >>> batch_padding([10, 2, 7, 7], 2).processed_tokens
    34
    """
    lens = np.asarray(lengths_in_order, dtype=np.int64)
    n = int(lens.size)
    if n == 0:
        return BatchPadding(strategy=strategy, batch=batch, real_tokens=0, processed_tokens=0, micro_batches=0,
                            peak_len=0, mean_len=0.0)
    starts = np.arange(0, n, batch)
    maxes = np.maximum.reduceat(lens, starts)
    sizes = np.diff(np.append(starts, n))
    return BatchPadding(strategy=strategy, batch=batch, real_tokens=int(lens.sum()),
                        processed_tokens=int((maxes * sizes).sum()), micro_batches=int(starts.size),
                        peak_len=int(maxes.max()), mean_len=float(maxes.mean()))


def length_grouped_order(lengths: Sequence[int] | np.ndarray, batch: int, perm: Sequence[int] | np.ndarray,
                         mega_batch_mult: int | None = None) -> list[int]:
    """transformers' ``get_length_grouped_indices`` given the random permutation ``perm`` it would draw.

    Megabatches of ``mega_batch_mult * batch`` consecutive indices of ``perm``, each sorted by length
    (descending, stable as Python's ``sorted``), concatenated; then the first element of the megabatch
    with the largest maximum is swapped with the very first element.
    """
    return _grouped_order(np.asarray(lengths, dtype=np.int64), batch, np.asarray(perm, dtype=np.int64),
                          mega_batch_mult).tolist()


def _grouped_order(lens: np.ndarray, batch: int, perm: np.ndarray, mega_batch_mult: int | None = None) -> np.ndarray:
    """:func:`length_grouped_order` in numpy, one int64 array (no Python int per example: 2,000,000 examples
    cost 16 MB here, where lists cost ~150 MB). ``np.lexsort`` is stable, as ``sorted(reverse=True)`` is: equal
    lengths keep their order in ``perm``."""
    n = int(lens.size)
    if mega_batch_mult is None:
        mega_batch_mult = min(n // (batch * 4), MEGA_BATCH_MULT) or 1
    size = mega_batch_mult * batch
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    mega = np.arange(n, dtype=np.int64) // size
    order = perm[np.lexsort((-lens[perm], mega))]  # by megabatch, then longest first, ties in perm order
    firsts = np.arange(0, n, size)
    top = int(np.argmax(lens[order[firsts]]))  # first maximum, as torch.argmax on CPU returns
    order[0], order[firsts[top]] = order[firsts[top]], order[0]
    return order


def padding_report(lengths: Sequence[int] | np.ndarray, *, batch: int, seq_len: int, seed: int = 0) -> PaddingReport:
    """Padding waste of the three strategies (module docstring) for ``lengths`` capped at ``seq_len``."""
    if batch < 1:
        raise MemfitError(f"--batch must be a positive integer, got {batch}")
    if seq_len < 1:
        raise MemfitError(f"--seq-len must be a positive integer, got {seq_len}")
    if seed < 0:
        raise MemfitError(f"--seed must be a non-negative integer, got {seed}")
    lens = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    if lens.size and int(lens.min()) < 1:
        raise MemfitError("an example has no tokens; drop empty examples before measuring padding")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(lens.size)
    random = batch_padding(lens[perm], batch, strategy="random")
    grouped = batch_padding(lens[_grouped_order(lens, batch, perm)], batch, strategy="grouped")
    packed = _packed(lens, batch, seq_len)
    return PaddingReport(batch=batch, seq_len=seq_len, seed=seed, random=random, grouped=grouped, packed=packed)


def _packed(lens: np.ndarray, batch: int, seq_len: int) -> BatchPadding:
    _, starts = fill_rows(lens, seq_len)
    rows = int(starts.size - 1)
    rows_per_step = max(1, -(-batch * rows // max(1, int(lens.size))))  # ceil(B * rows / n)
    return BatchPadding(strategy="packed", batch=rows_per_step, real_tokens=int(lens.sum()),
                        processed_tokens=rows * seq_len, micro_batches=-(-rows // rows_per_step),
                        peak_len=seq_len if rows else 0, mean_len=float(seq_len if rows else 0))
