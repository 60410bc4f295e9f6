"""The token-length distribution of a data set, measured with the real tokenizer.

The lesson's third rep: "measure the token-length distribution of a real dataset with the actual
tokenizer. Find the 95th percentile. That, not the maximum, is your sequence length."

Percentiles are nearest-rank (numpy's ``method="inverted_cdf"``): the p-th percentile of ``n`` sorted
lengths ``x_(1) <= ... <= x_(n)`` is ``x_(ceil(p/100 * n))``, a length that occurs in the data, so at
least p% of the examples fit in it. The recommended sequence length is p95 rounded up to a multiple of
64 (tensor-core and kernel tile friendly)::

    recommended = 64 * ceil(p95 / 64)

Worked example: lengths 1..100 give p95 = x_(95) = 95, recommended = 128, which truncates no example;
lengths 1..1000 give p95 = 950, recommended 960, which truncates the 40 examples longer than 960 (4%).

Truncation at ``--seq-len L``: ``over_seq_len = #{i: l_i > L}`` examples lose
``truncated_tokens = sum(max(0, l_i - L))`` tokens, of which ``loss_tokens_truncated`` carried loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memfit.data.padding import PaddingReport, padding_report
from memfit.data.records import Skipped
from memfit.data.tokenizer import SpecialTokens
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX, seq_round_up
from memfit.progress import ProgressCallback

if TYPE_CHECKING:
    from memfit.data.tokenize import TokenizedExample
    from memfit.estimate import ModelShape, RunSpec

__all__ = [
    "PERCENTILES",
    "ActivationRow",
    "LengthReport",
    "analyse_lengths",
    "length_report",
    "nearest_rank_percentile",
    "strategy_activations",
]

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
DEFAULT_SEQ_LEN = 2048
DEFAULT_BATCH = 8
MIN_SEQ_LEN = 2  # a causal LM learns token t from tokens < t: a 1-token row carries no loss (as memfit pack)


def _too_small(flag: str, value: object, least: int) -> str:
    """The message for a flag below its least value, with the reason where there is one."""
    if flag == "--seq-len":
        return (f"--seq-len must be an integer of at least {least} tokens, got {value!r}: a causal LM learns "
                "each token from the ones before it, so a row of 1 token carries no loss (memfit pack needs "
                "the same)")
    if least == 0:
        return f"{flag} must be a non-negative integer, got {value!r}"
    return f"{flag} must be a positive integer, got {value!r}"


def nearest_rank_percentile(sorted_lengths: np.ndarray, p: float) -> int:
    """The nearest-rank p-th percentile of ascending ``sorted_lengths``: ``x_(ceil(p/100 * n))``.

    >>> nearest_rank_percentile(np.arange(1, 101), 95)
    95
    """
    n = int(sorted_lengths.size)
    if n == 0:
        raise MemfitError("no lengths to take a percentile of")
    rank = max(1, math.ceil(p / 100 * n))
    return int(sorted_lengths[rank - 1])


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivationRow:
    """The estimate's activation memory for one batching strategy, at its peak and mean padded length."""

    strategy: str
    batch: int
    peak_len: int
    mean_len: int
    activation_bytes_peak: int
    activation_bytes_mean: int
    peak_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "batch": self.batch, "peak_len": self.peak_len,
                "mean_len": self.mean_len, "activation_bytes_peak": self.activation_bytes_peak,
                "activation_bytes_mean": self.activation_bytes_mean, "peak_bytes": self.peak_bytes}


@dataclass(frozen=True, kw_only=True, slots=True)
class LengthReport:
    """Everything ``memfit lengths`` reports. Lengths are in tokens; ``lengths`` is per example, in file order (an
    int64 array: 8 bytes an example, all that is kept of the data)."""

    source: str
    tokenizer: str
    mode: str
    count: int
    min: int
    mean: float
    max: int
    percentiles: dict[str, int]
    total_tokens: int
    seq_len: int
    over_seq_len: int
    truncated_tokens: int
    loss_tokens: int | None
    loss_tokens_truncated: int | None
    recommended_seq_len: int
    recommended_over: int
    recommended_truncated_tokens: int
    padding: PaddingReport
    skipped: list[Skipped]
    lengths: np.ndarray = field(repr=False, compare=False)  # int64, one per example, in file order
    activations: list[ActivationRow] | None = None
    model: str | None = None
    special_tokens: SpecialTokens | None = None
    loss_positions_max: int | None = None  # most shifted loss positions of one example within seq_len (None: text)

    def loss_token_share(self) -> float | None:
        """The largest share of one row's ``seq_len - 1`` scored positions whose label is not -100, over the
        examples (positions 1..min(len, seq_len)-1: the causal shift drops label 0): what TRL's fused head scores
        in the worst micro-batch, as ``--loss-token-share``; None for text data (every token carries loss).

        Worked: seq_len 8, an example of 6 tokens with labels [-100, -100, -100, 4, 5, 6] has 3 loss positions of
        7: share 3/7 = 0.43 if no example has more."""
        if self.loss_positions_max is None:
            return None
        return min(1.0, max(self.loss_positions_max, 1) / (self.seq_len - 1))

    @property
    def p95(self) -> int:
        return self.percentiles["p95"]

    @property
    def recommended_truncated_share(self) -> float:
        """Share of examples longer than the recommended sequence length."""
        return self.recommended_over / self.count if self.count else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The figures (count, min, mean, max, percentiles, recommended_seq_len, over_seq_len, truncated_tokens,
        loss_tokens, padding_waste, skipped), then where they came from and the details behind them."""
        d: dict[str, Any] = {
            "count": self.count,
            "min": self.min,
            "mean": self.mean,
            "max": self.max,
            "percentiles": dict(self.percentiles),
            "recommended_seq_len": self.recommended_seq_len,
            "over_seq_len": self.over_seq_len,
            "truncated_tokens": self.truncated_tokens,
            "loss_tokens": self.loss_tokens,
            "padding_waste": {s.strategy: s.waste for s in self.padding.strategies()},
            "skipped": [s.to_dict() for s in self.skipped],
            "source": self.source,
            "tokenizer": self.tokenizer,
            "mode": self.mode,
            "seq_len": self.seq_len,
            "batch": self.padding.batch,
            "total_tokens": self.total_tokens,
            "loss_tokens_truncated": self.loss_tokens_truncated,
            "recommended_over": self.recommended_over,
            "recommended_truncated_tokens": self.recommended_truncated_tokens,
            "recommended_truncated_share": self.recommended_truncated_share,
            "padding": self.padding.to_dict(),
        }
        if self.special_tokens is not None:
            d["special_tokens"] = self.special_tokens.to_dict()
        if self.activations is not None:
            d["model"] = self.model
            d["activations"] = [a.to_dict() for a in self.activations]
        return d

    def breakdown(self) -> dict[str, int]:
        out = {"tokens/total": self.total_tokens, "tokens/truncated": self.truncated_tokens}
        if self.loss_tokens is not None:
            out["tokens/loss"] = self.loss_tokens
        out.update({f"padding/{k}": v for k, v in self.padding.breakdown().items()})
        return out


def length_report(
    lengths: Sequence[int] | np.ndarray,
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = DEFAULT_BATCH,
    examples: Sequence[TokenizedExample] | None = None,
    mode: str = "text",
    skipped: Sequence[Skipped] = (),
    source: str = "",
    tokenizer: str = "",
    seed: int = 0,
    loss_tokens: int | None = None,
    loss_tokens_truncated: int | None = None,
) -> LengthReport:
    """Statistics of ``lengths`` (module docstring).

    Args:
        lengths: tokens per example, in file order.
        seq_len: the training sequence length (truncation, packed rows); at least 2.
        batch: the micro-batch size the padding waste is worked at.
        examples: the tokenized examples, in the same order: they give the loss tokens, reported for the
            prompt/completion and chat modes (``None`` in text mode, where every token carries loss).
        mode: the layout the examples were tokenised in (``"text"``, ``"prompt_completion"``, ``"messages"``).
        skipped: the records that were not analysed.
        source: the data's name, for the report.
        tokenizer: the tokenizer's name, for the report.
        seed: seed of the random batch order.
        loss_tokens: the loss tokens, counted already (a streamed data set keeps no examples); used when
            ``examples`` is None and ``mode`` is not ``"text"``.
        loss_tokens_truncated: of those, the ones past ``seq_len``.

    Returns:
        The report (without activations: :func:`strategy_activations` adds them).

    Raises:
        MemfitError: ``seq_len < 2`` or no lengths.
    """
    if seq_len < MIN_SEQ_LEN:
        raise MemfitError(_too_small("--seq-len", seq_len, MIN_SEQ_LEN))
    lens = np.asarray(lengths, dtype=np.int64)
    if lens.size == 0:
        raise MemfitError(f"{source or 'the data'} has no examples to measure")
    srt = np.sort(lens)
    pct = {f"p{p}": nearest_rank_percentile(srt, p) for p in PERCENTILES}
    recommended = seq_round_up(pct["p95"])
    loss = loss_cut = None
    if examples is not None and mode != "text":
        loss = sum(e.loss_tokens for e in examples)
        loss_cut = sum(sum(1 for t in e.labels[seq_len:] if t != IGNORE_INDEX) for e in examples if len(e) > seq_len)
    elif mode != "text":
        loss, loss_cut = loss_tokens, loss_tokens_truncated
    return LengthReport(
        source=source,
        tokenizer=tokenizer,
        mode=mode,
        count=int(lens.size),
        min=int(srt[0]),
        mean=float(lens.mean()),
        max=int(srt[-1]),
        percentiles=pct,
        total_tokens=int(lens.sum()),
        seq_len=seq_len,
        over_seq_len=int((lens > seq_len).sum()),
        truncated_tokens=int(np.maximum(lens - seq_len, 0).sum()),
        loss_tokens=loss,
        loss_tokens_truncated=loss_cut,
        recommended_seq_len=recommended,
        recommended_over=int((lens > recommended).sum()),
        recommended_truncated_tokens=int(np.maximum(lens - recommended, 0).sum()),
        padding=padding_report(lens, batch=batch, seq_len=seq_len, seed=seed),
        skipped=list(skipped),
        lengths=lens,
    )


def analyse_lengths(
    data: str | Path,
    tokenizer: str | Path | Any,
    *,
    text: str | None = None,
    prompt: str | None = None,
    completion: str | None = None,
    messages: str | None = None,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = DEFAULT_BATCH,
    seed: int = 0,
    progress: bool = False,
    eos: str | bool | None = None,
    on_progress: ProgressCallback | None = None,
) -> LengthReport:
    """Stream ``data``, tokenise it with ``tokenizer`` in batches and report its lengths.

    The one call other commands use (``memfit fit --data`` takes ``report.p95`` and
    ``report.recommended_seq_len`` from here). Examples that tokenise to nothing (or chats the template
    rejects) are counted in ``skipped``, not measured. Only the lengths are kept (an int array, 8 bytes an
    example) and two running sums of loss tokens; records and token ids are dropped batch by batch, so the
    memory does not grow with the data beyond the lengths (``bench/bench_scale.py``: 2,000,000 examples).

    Args:
        data: the data file or ``save_to_disk`` directory (:func:`memfit.data.formats.open_records`).
        tokenizer: a tokenizer path (:func:`memfit.data.tokenizer.load_tokenizer`) or a loaded tokenizer.
        text: the field holding the whole text.
        prompt: the field holding the prompt (no loss).
        completion: the field holding the completion.
        messages: the field holding a chat. With no field named, they are inferred.
        seq_len: the training sequence length, at least 2.
        batch: the micro-batch size the padding waste is worked at, at least 1.
        seed: seed of the random batch order, at least 0.
        progress: show a progress bar (bytes read, rate, time left) while tokenising, on a terminal.
        eos: ``load_tokenizer``'s ``eos`` (``--eos TOKEN`` / ``--no-eos``; ``None``: the tokenizer's own rule),
            used when ``tokenizer`` is a path.
        on_progress: called after each batch with ``(done, total)`` in the stream's unit (bytes, or rows of
            a Parquet file).

    Returns:
        The report, with the special-tokens rule that was applied.

    Raises:
        MemfitError: a bad flag value, an unreadable file or tokenizer, or no example to measure.
    """
    from memfit.data.formats import open_records
    from memfit.data.tokenize import iter_tokenized
    from memfit.data.tokenizer import load_tokenizer, special_tokens, tokenizer_name
    from memfit.progress import progress_bar

    for flag, value, least in (("--seq-len", seq_len, MIN_SEQ_LEN), ("--batch", batch, 1), ("--seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise MemfitError(_too_small(flag, value, least))
    stream = open_records(data, text=text, prompt=prompt, completion=completion, messages=messages)
    tok = load_tokenizer(tokenizer, eos=eos) if isinstance(tokenizer, str | Path) else tokenizer
    spec = stream.spec
    counter = _LengthCounter(seq_len, count_loss=spec.mode != "text")
    _, total, unit = stream.progress()
    with progress_bar(f"tokenising {Path(data).name}", total=total, unit=unit,
                      enabled=None if progress else False) as bar:
        for tb in iter_tokenized(tok, stream, spec):
            counter.add(tb.lines, tb.examples, tb.rejected)
            done, total, _ = stream.progress()
            bar.update(done, total)
            if on_progress is not None:
                on_progress(done, total)
    skipped = sorted([*stream.skipped, *counter.skipped], key=lambda s: s.line)
    report = length_report(counter.lengths(), seq_len=seq_len, batch=batch, mode=spec.mode, skipped=skipped,
                           source=str(data), tokenizer=tokenizer_name(tok), seed=seed,
                           loss_tokens=counter.loss, loss_tokens_truncated=counter.loss_cut)
    return replace(report, special_tokens=special_tokens(tok),
                   loss_positions_max=counter.loss_max if spec.mode != "text" else None)


class _LengthCounter:
    """What :func:`analyse_lengths` keeps of the examples: their lengths (int64 chunks), the loss tokens and
    the loss tokens past ``seq_len`` (running sums, from each batch's labels at once), the empty ones."""

    def __init__(self, seq_len: int, *, count_loss: bool) -> None:
        self.seq_len = seq_len
        self.count_loss = count_loss
        self.loss = 0
        self.loss_cut = 0
        self.loss_max = 0  # most loss labels at positions 1..min(len, seq_len)-1 of one example
        self.skipped: list[Skipped] = []
        self._chunks: list[np.ndarray] = []

    def add(self, lines: Sequence[int], examples: Sequence[TokenizedExample], rejected: dict[int, str]) -> None:
        lens = np.fromiter((len(e) for e in examples), dtype=np.int64, count=len(examples))
        for i in np.flatnonzero(lens == 0).tolist():  # nothing to train on, or a chat the template rejects
            self.skipped.append(Skipped(line=lines[i], reason=rejected.get(i, "tokenises to no tokens")))
        self._chunks.append(lens[lens > 0])
        if not self.count_loss or not lens.size:
            return
        from itertools import chain

        carries = np.fromiter(chain.from_iterable(e.labels for e in examples), dtype=np.int64,
                              count=int(lens.sum())) != IGNORE_INDEX
        self.loss += int(carries.sum())
        csum = np.concatenate(([0], np.cumsum(carries)))
        starts = np.cumsum(lens) - lens
        kept = lens > 0
        within = csum[starts[kept] + np.minimum(lens[kept], self.seq_len)] - csum[starts[kept] + 1]
        self.loss_max = max(self.loss_max, int(within.max(initial=0)))
        long = np.flatnonzero(lens > self.seq_len)
        if long.size:  # loss tokens at positions >= seq_len of each longer example
            self.loss_cut += int((csum[starts[long] + lens[long]] - csum[starts[long] + self.seq_len]).sum())

    def lengths(self) -> np.ndarray:
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=np.int64)


def strategy_activations(report: LengthReport, shape: ModelShape, spec: RunSpec) -> list[ActivationRow]:
    """The estimate's activation memory per batching strategy, at each strategy's rows per micro-batch
    (``--batch`` examples, or the packed rows carrying as many) and padded row length: the longest
    micro-batch (which sets the peak) and the mean one.

    Calls ``memfit.estimate.estimate_memory(shape, spec)`` with ``batch`` and ``seq`` replaced.
    """
    from memfit.estimate import estimate_memory

    rows = []
    for s in report.padding.strategies():
        batch = s.batch
        mean_len = max(1, math.ceil(s.mean_len))
        at_peak = estimate_memory(shape, spec.with_(batch=batch, seq=max(1, s.peak_len)))
        at_mean = estimate_memory(shape, spec.with_(batch=batch, seq=mean_len))
        rows.append(ActivationRow(strategy=s.strategy, batch=batch, peak_len=s.peak_len, mean_len=mean_len,
                                  activation_bytes_peak=at_peak.activation_bytes,
                                  activation_bytes_mean=at_mean.activation_bytes,
                                  peak_bytes=at_peak.peak_bytes))
    return rows
