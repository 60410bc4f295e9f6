"""What the advisor needs to know about the data: its token lengths and its padding waste.

Built from a :class:`memfit.data.lengths.LengthReport` (``memfit lengths``) by the CLI, read through the
:class:`LengthStats` protocol, so this package never imports the data layer or the tokenizers.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memfit.estimate.constants import seq_round_up

PaddingAt = Callable[[int, int], tuple[float, float]]  # (batch, seq) -> (waste_random, waste_packed)


class BatchWaste(Protocol):
    """One batching strategy's padding (``memfit.data.padding.BatchPadding``)."""

    @property
    def waste(self) -> float: ...

    @property
    def peak_len(self) -> int: ...


class PaddingStats(Protocol):
    """Padding waste at one micro-batch (``memfit.data.padding.PaddingReport``)."""

    @property
    def batch(self) -> int: ...

    @property
    def random(self) -> BatchWaste: ...

    @property
    def packed(self) -> BatchWaste: ...


class LengthStats(Protocol):
    """What the advisor reads of a lengths report (``memfit.data.lengths.LengthReport``)."""

    @property
    def source(self) -> str: ...

    @property
    def lengths(self) -> Sequence[int]: ...

    @property
    def p95(self) -> int: ...

    @property
    def recommended_seq_len(self) -> int: ...

    @property
    def seq_len(self) -> int: ...

    @property
    def padding(self) -> PaddingStats: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class DataProfile:
    """Token lengths of a data set (sorted) and its padding waste at the user's micro-batch and seq.

    ``waste_random`` / ``waste_packed`` are shares of processed tokens that are padding with random
    batches and with memfit's packer (largest fit with exact fit); ``peak_len`` is the padded length of the
    longest random micro-batch (what actually sets the activation peak: min(longest example, seq)).
    """

    source: str
    lengths: tuple[int, ...]  # sorted ascending
    p95: int
    recommended_seq_len: int  # p95 rounded up to a multiple of 64
    batch: int
    seq_len: int
    waste_random: float
    waste_packed: float
    peak_len: int
    padding_at: PaddingAt | None = field(default=None, repr=False, compare=False)
    _cache: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict, repr=False, compare=False)
    _means: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    def wastes(self, batch: int, seq: int) -> tuple[float, float]:
        """(random, packed) padding waste at micro-batch ``batch`` and rows of ``seq`` tokens: the lengths
        report's figures at its own (batch, seq), else ``padding_at`` (memfit.data.padding), else those."""
        if (batch, seq) == (self.batch, self.seq_len) or self.padding_at is None:
            return self.waste_random, self.waste_packed
        key = (batch, seq)
        if key not in self._cache:
            self._cache[key] = self.padding_at(batch, seq)
        return self._cache[key]

    def mean_tokens(self, seq: int) -> float:
        """Mean tokens per example once truncated at ``seq``: mean(min(length, seq)).

        >>> _profile([100, 200, 300]).mean_tokens(250)
        183.33333333333334
        """
        if seq not in self._means:
            cut = bisect_right(self.lengths, seq)
            total = sum(self.lengths[:cut]) + (len(self.lengths) - cut) * seq
            self._means[seq] = total / len(self.lengths) if self.lengths else 0.0
        return self._means[seq]

    def packing_efficiency(self, seq: int) -> float:
        """Share of a packed row's ``seq`` slots that hold real tokens (1 - the packed padding waste)."""
        return 1.0 - self.wastes(self.batch, seq)[1]

    def packed_rows_exact(self, examples: int, seq: int) -> float:
        """Rows of ``seq`` tokens that ``examples`` average examples fill when packed:
        examples x mean_tokens(seq) / (seq x packing_efficiency(seq))."""
        return examples * self.mean_tokens(seq) / (seq * self.packing_efficiency(seq))

    def packed_rows(self, examples: int, seq: int) -> int:
        """Packed rows per optimizer step that keep ``examples`` examples per step on average: the exact
        figure rounded to the nearest row, at least one. GSM8K train with the llama2 tokenizer (7,473
        examples, mean 197.6 tokens), 8 examples at seq 576: 8 x 197.6 = 1,581 tokens / (576 x ~99%) = 2.8
        -> 3 rows, which carry ~8.7 examples per step.

        >>> _profile([100] * 10, waste_packed=0.0).packed_rows(8, 200)
        4
        """
        return max(1, math.floor(self.packed_rows_exact(examples, seq) + 0.5))

    def examples_in_rows(self, rows: int, seq: int) -> float:
        """Examples that ``rows`` packed rows of ``seq`` tokens carry on average (the inverse of
        :meth:`packed_rows_exact`)."""
        mean = self.mean_tokens(seq)
        return rows * seq * self.packing_efficiency(seq) / mean if mean else 0.0

    def padded_tokens_per_example(self, batch: int, seq: int) -> float:
        """Tokens processed per example in random micro-batches of ``batch`` padded to their longest member
        (capped at ``seq``): mean_tokens(seq) / (1 - waste_random)."""
        random, _ = self.wastes(batch, seq)
        return self.mean_tokens(seq) / (1.0 - random) if random < 1 else float(seq)

    @property
    def count(self) -> int:
        return len(self.lengths)

    @property
    def max_len(self) -> int:
        return self.lengths[-1] if self.lengths else 0

    def truncated(self, seq: int) -> int:
        """How many examples are longer than ``seq`` tokens.

        >>> _profile([100, 200, 300]).truncated(250)
        1
        """
        return len(self.lengths) - bisect_right(self.lengths, seq)

    def truncated_share(self, seq: int) -> float:
        return self.truncated(seq) / len(self.lengths) if self.lengths else 0.0

    def no_cut_seq_len(self) -> int:
        """The longest example rounded up to a multiple of 64: the shortest sequence that truncates nothing."""
        return seq_round_up(self.max_len)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "count": self.count,
            "max": self.max_len,
            "p95": self.p95,
            "recommended_seq_len": self.recommended_seq_len,
            "batch": self.batch,
            "seq_len": self.seq_len,
            "padding_waste": {"random": self.waste_random, "packed": self.waste_packed},
            "peak_len": self.peak_len,
        }

    @classmethod
    def from_length_report(cls, report: LengthStats, padding_at: PaddingAt | None = None) -> DataProfile:
        """From ``memfit.data.lengths.LengthReport`` (:class:`LengthStats`); ``padding_at`` recomputes the
        padding waste at another micro-batch or sequence length."""
        return cls(
            source=str(report.source),
            lengths=tuple(sorted(int(n) for n in report.lengths)),
            p95=int(report.p95),
            recommended_seq_len=int(report.recommended_seq_len),
            batch=int(report.padding.batch),
            seq_len=int(report.seq_len),
            waste_random=float(report.padding.random.waste),
            waste_packed=float(report.padding.packed.waste),
            peak_len=int(report.padding.random.peak_len),
            padding_at=padding_at,
        )


def _profile(lengths: list[int], *, waste_random: float = 0.0, waste_packed: float = 0.0) -> DataProfile:
    """A profile from bare lengths (doctests and tests)."""
    srt = tuple(sorted(lengths))
    p95 = srt[max(0, math.ceil(0.95 * len(srt)) - 1)]
    return DataProfile(source="lengths", lengths=srt, p95=p95, recommended_seq_len=seq_round_up(p95), batch=1,
                       seq_len=srt[-1], waste_random=waste_random, waste_packed=waste_packed, peak_len=srt[-1])
