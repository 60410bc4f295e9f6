"""``memfit fit``: the lesson's order of remedies as an advisor, and an exhaustive search beside it.

The ordered path
================
"When a run does not fit, in order of what you give up" (lesson 7), applied one after the other to the
user's spec until the step fits the GPU by :mod:`memfit.estimate.fits`' rule, the one ``memfit estimate``
prints: what the step reserves (CUDA: the peak + the allocator's overhead + the CUDA context) plus the
``headroom`` (default 5% of the GPU) within the GPU's bytes. ``budget_bytes`` is the GPU less the headroom:
the most the step may reserve.

1. ``checkpointing`` none -> full: costs time only (one extra forward, ~x1.33).
2. ``micro_batch``: a smaller micro-batch b' with more accumulation, ``b' * grad_accum' = b * grad_accum``
   exactly (b' divides the effective batch): a little time, nothing statistical. The largest b' that fits.
3. ``seq_len``: a shorter sequence changes the task. With data: the longest multiple of 64 that fits, no
   shorter than the data's p95 (rounded up to 64), with the share of examples it truncates. Without data
   the FALLBACK RULE: the longest multiple of 64 that fits, no shorter than half the sequence; how many
   examples that truncates is unknown (run ``memfit lengths``).
4. ``quantize``: LoRA -> QLoRA, a 4-bit NF4 base: some quality. (A full fine-tune first becomes a LoRA run,
   ``adapter``, which changes what is learned.)
5. ``rank``: the largest power-of-two rank down to 8 that fits: capacity, and it saves the least.

Beyond the lesson, placed by what they give up (time or nothing, so all before step 3): with data,
``longest_example`` first (a sequence no longer than the longest example, rounded up to 64, truncates
nothing: batches are never padded beyond it); ``attention`` eager -> sdpa (a memory-efficient kernel
gives up nothing); ``packing`` after checkpointing (with data; it keeps the effective batch: the E examples
of an optimizer step, E x mean tokens, fill R = round(E x mean / (s x packing efficiency)) packed rows of
s tokens, split into micro-batches of the largest divisor of R not above R / grad_accum; it saves time as
well, the padding no longer processed); after
step 2 ``chunked_loss`` (fused linear cross-entropy: no full fp32 logits) and ``sharding`` over
``--gpus N`` (ZeRO-1/2/3, the least that fits). A step that saves less than 0.5% of the budget is
skipped and listed with the reason. If nothing fits, the report names the smallest GPU in the table on
which the final plan (and the initial spec) would fit.

The cheapest configuration
==========================
Every combination of the knobs above (checkpointing none/full/every-2/sqrt, every micro-batch
dividing the effective batch, packing, sequence lengths, method, ranks, attention kernels, loss, sharding)
is ranked by :class:`memfit.advise.costs.Cost` (what it gives up in the lesson's order of reluctance, then
the step-time factor) and estimated in that order; the first that fits is the cheapest (ties in cost go to
the fewest changed knobs, then the fewest needing more than a transformers flag, then the smallest peak).
Thousands of candidates; typically tens to a few hundred estimates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from memfit.advise.costs import Cost, TimeModel
from memfit.advise.data import SEQ_MULTIPLE, DataProfile
from memfit.advise.sharding import SHARDINGS, shard_peak
from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec
from memfit.estimate.fits import DEFAULT_HEADROOM, Headroom, judge_fit, reserved_bytes
from memfit.estimate.gpus import GpuSpec, gpu_table, resolve_gpu

__all__ = ["ACTIONS", "DEFAULT_HEADROOM", "LESSON_ORDER", "Cheapest", "Evaluator", "FitReport", "FitStep", "Headroom",
           "RankLesson", "Setup", "fit", "smallest_gpu"]

LESSON_ORDER: tuple[str, ...] = ("checkpointing", "micro_batch", "seq_len", "quantize", "rank")
ACTIONS: tuple[str, ...] = ("longest_example", "attention", "checkpointing", "packing", "micro_batch",
                            "chunked_loss", "sharding", "seq_len", "adapter", "quantize", "rank")
MIN_RANK = 8  # the lesson's "64 -> 8"; the rank step never goes below it
# a step must save at least this much to be taken (else it is listed as skipped): 0.5% of the budget, 1 MiB
MIN_SAVING_SHARE = 0.005
MIN_SAVING_BYTES = 1024**2


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """One candidate configuration: a RunSpec plus what is not in it (sharding, packing)."""

    spec: RunSpec
    sharding: str = "none"
    packing: bool = False

    def with_(self, **changes: Any) -> Setup:
        sharding = changes.pop("sharding", self.sharding)
        packing = changes.pop("packing", self.packing)
        return Setup(spec=self.spec.with_(**changes) if changes else self.spec, sharding=sharding, packing=packing)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "sharding": self.sharding, "packing": self.packing}


@dataclass(frozen=True, kw_only=True, slots=True)
class FitStep:
    """One remedy applied on the ordered path: the configuration after it, its peak, what it saved."""

    action: str
    setup: Setup
    peak_bytes: int
    saved_bytes: int
    cost: str
    time_factor: float  # this step's own factor
    gives_up: str  # nothing | time | task | quality | capacity
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "spec": self.setup.spec.to_dict(), "peak_bytes": self.peak_bytes,
                "reserved_bytes": reserved_bytes(self.peak_bytes, self.setup.spec.device),
                "saved_bytes": self.saved_bytes, "cost": self.cost, "time_factor": round(self.time_factor, 4),
                "gives_up": self.gives_up, "sharding": self.setup.sharding, "packing": self.setup.packing,
                "fits": self.fits}


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    action: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class Cheapest:
    """The cheapest fitting configuration of the exhaustive search (``setup`` None when nothing fits)."""

    setup: Setup | None
    peak_bytes: int | None
    cost: Cost | None
    candidates: int
    evaluated: int
    changes: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.setup is not None,
            "spec": self.setup.spec.to_dict() if self.setup else None,
            "sharding": self.setup.sharding if self.setup else None,
            "packing": self.setup.packing if self.setup else None,
            "peak_bytes": self.peak_bytes,
            "cost": self.cost.to_dict() if self.cost else None,
            "changes": self.changes,
            "needs": list(self.needs),
            "candidates": self.candidates,
            "evaluated": self.evaluated,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLesson:
    """Why rank comes last, in numbers: lowering the rank saves ``saved_bytes`` against ``activation_bytes``."""

    from_rank: int
    to_rank: int
    saved_bytes: int
    activation_bytes: int
    trainable_from: int
    trainable_to: int
    peak_after_bytes: int  # the user's spec with only the rank lowered
    fits_after: bool

    def to_dict(self) -> dict[str, Any]:
        return {"from_rank": self.from_rank, "to_rank": self.to_rank, "saved_bytes": self.saved_bytes,
                "peak_after_bytes": self.peak_after_bytes, "fits_after": self.fits_after,
                "activation_bytes": self.activation_bytes, "trainable_params_from": self.trainable_from,
                "trainable_params_to": self.trainable_to}


@dataclass(frozen=True, kw_only=True, slots=True)
class FitReport:
    """Everything ``memfit fit`` answers. ``to_dict`` is issue 9's JSON (plus context keys)."""

    model: str
    gpu: GpuSpec
    gpus: int
    headroom: Headroom
    budget_bytes: int
    initial: Setup
    initial_peak_bytes: int
    steps: tuple[FitStep, ...]
    skipped: tuple[Skipped, ...]
    final: Setup
    final_peak_bytes: int
    final_cost: Cost
    cheapest: Cheapest
    rank_lesson: RankLesson | None
    smallest_gpu_initial: GpuSpec | None
    smallest_gpu_final: GpuSpec | None
    time_model: TimeModel
    data: DataProfile | None
    fallback_seq_rule: str | None

    @property
    def device(self) -> str:
        return self.initial.spec.device

    @property
    def initial_reserved_bytes(self) -> int:
        return reserved_bytes(self.initial_peak_bytes, self.device)

    @property
    def final_reserved_bytes(self) -> int:
        return reserved_bytes(self.final_peak_bytes, self.device)

    @property
    def headroom_bytes(self) -> int:
        return self.headroom.bytes_of(self.gpu.bytes)

    @property
    def fits_initially(self) -> bool:
        """The rule of :mod:`memfit.estimate.fits` (reserved + headroom <= GPU), as ``memfit estimate`` says."""
        return self.initial_reserved_bytes <= self.budget_bytes

    @property
    def fits(self) -> bool:
        return self.final_reserved_bytes <= self.budget_bytes

    def rule(self, peak_bytes: int) -> str:
        """``reserved 20.42 GiB + headroom 1.20 GiB (5% of the GPU) = 21.62 GiB <= 24.00 GiB (24GiB)``."""
        per = " per GPU" if self.gpus > 1 else ""
        return judge_fit(peak_bytes, self.device, self.gpu, self.headroom).rule() + per

    def breakdown(self) -> dict[str, int]:
        """Hierarchical byte keys: ``initial/peak``, ``steps/1-checkpointing/peak`` and ``/saved``, ...,
        ``final/peak``, ``cheapest/peak``, ``budget``."""
        out = {"budget": self.budget_bytes, "initial/peak": self.initial_peak_bytes}
        for i, s in enumerate(self.steps, 1):
            out[f"steps/{i}-{s.action}/peak"] = s.peak_bytes
            out[f"steps/{i}-{s.action}/saved"] = s.saved_bytes
        out["final/peak"] = self.final_peak_bytes
        if self.cheapest.peak_bytes is not None:
            out["cheapest/peak"] = self.cheapest.peak_bytes
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits_initially": self.fits_initially,
            "steps": [s.to_dict() for s in self.steps],
            "final": {"spec": self.final.spec.to_dict(), "peak_bytes": self.final_peak_bytes,
                      "reserved_bytes": self.final_reserved_bytes, "rule": self.rule(self.final_peak_bytes),
                      "sharding": self.final.sharding, "packing": self.final.packing,
                      "cost": self.final_cost.to_dict()},
            "fits": self.fits,
            "cheapest": self.cheapest.to_dict(),
            "model": self.model,
            "gpu": self.gpu.to_dict(),
            "gpus": self.gpus,
            "headroom": self.headroom.to_dict(),
            "budget_bytes": self.budget_bytes,
            "headroom_bytes": self.headroom_bytes,
            "initial": {"spec": self.initial.spec.to_dict(), "peak_bytes": self.initial_peak_bytes,
                        "reserved_bytes": self.initial_reserved_bytes, "rule": self.rule(self.initial_peak_bytes)},
            "skipped": [s.to_dict() for s in self.skipped],
            "rank_lesson": self.rank_lesson.to_dict() if self.rank_lesson else None,
            "smallest_gpu": {
                "initial": self.smallest_gpu_initial.to_dict() if self.smallest_gpu_initial else None,
                "final": self.smallest_gpu_final.to_dict() if self.smallest_gpu_final else None,
            },
            "time_model": self.time_model.to_dict(),
            "data": self.data.to_dict() if self.data else None,
            "seq_rule": self.fallback_seq_rule,
        }


class Evaluator:
    """Peak bytes per GPU of a Setup, with the estimates memoised (a RunSpec is hashable)."""

    def __init__(self, shape: ModelShape, gpus: int,
                 estimate: Callable[[ModelShape, RunSpec], Any] | None = None) -> None:
        self.shape = shape
        self.gpus = gpus
        if estimate is None:
            from memfit.estimate import estimate_memory

            estimate = estimate_memory
        self._estimate_fn = estimate
        self._estimates: dict[RunSpec, Any] = {}
        self._peaks: dict[tuple[RunSpec, str], int] = {}

    @property
    def estimates(self) -> int:
        """How many distinct estimates were computed."""
        return len(self._estimates)

    def estimate(self, spec: RunSpec) -> Any:
        est = self._estimates.get(spec)
        if est is None:
            est = self._estimate_fn(self.shape, spec)
            self._estimates[spec] = est
        return est

    def need(self, setup: Setup) -> int:
        """What the setup reserves per GPU (:func:`memfit.estimate.fits.reserved_bytes` of its peak): the
        figure judged against the budget (GPU bytes less the headroom)."""
        return reserved_bytes(self.peak(setup), setup.spec.device)

    def peak(self, setup: Setup) -> int:
        key = (setup.spec, setup.sharding)
        value = self._peaks.get(key)
        if value is None:
            est = self.estimate(setup.spec)
            value = shard_peak(est, self.shape, setup.spec, setup.sharding, self.gpus).peak_bytes
            self._peaks[key] = value
        return value


# ---------------------------------------------------------------------------------------------------------
# cost of a setup against the user's


def setup_cost(initial: Setup, setup: Setup, *, time_model: TimeModel, data: DataProfile | None) -> Cost:
    """What ``setup`` gives up against ``initial`` (see :mod:`memfit.advise.costs`)."""
    s0, s = initial.spec, setup.spec
    time = time_model.checkpointing(s.checkpointing) / time_model.checkpointing(s0.checkpointing)
    # rows per optimizer step R and micro-steps R/b; time ~ R*s0 + (R/b)*T0 (seq itself counted as 1.0)
    t0 = time_model.micro_step_overhead_tokens
    rows0 = s0.batch * s0.grad_accum
    rows = s.batch * s.grad_accum
    work = float(rows)  # in the user's rows: an unpacked row processes what the user's rows did
    if setup.packing and not initial.packing and data is not None:
        # a packed row processes s tokens; one of the user's padded rows P0 = mean / (1 - waste_random)
        work = rows * s.seq / data.padded_tokens_per_example(s0.batch, s0.seq)
    time *= (work * s0.seq + (rows / s.batch) * t0) / (rows0 * s0.seq + (rows0 / s0.batch) * t0)
    if s.method == "qlora" and s0.method != "qlora":
        time *= time_model.qlora_factor
    if setup.sharding == "zero3" and initial.sharding != "zero3":
        time *= time_model.zero3_factor
    halvings = math.log2(s0.rank / s.rank) if s0.is_adapter and s.rank < s0.rank else 0.0
    if s.seq < s0.seq:
        truncation = (data.truncated_share(s.seq) - data.truncated_share(s0.seq)) if data else 1.0 - s.seq / s0.seq
    else:
        truncation = 0.0
    return Cost(time_factor=time, rank_halvings=halvings, quantised=s.method == "qlora" and s0.method != "qlora",
                full_to_adapter=s0.method == "full" and s.method != "full", truncation=max(0.0, truncation))


def divisors(n: int) -> list[int]:
    """All divisors of n, ascending. >>> divisors(12) == [1, 2, 3, 4, 6, 12]"""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def round_up(n: int, multiple: int = SEQ_MULTIPLE) -> int:
    return multiple * max(1, math.ceil(n / multiple))


def packed_micro_batch(rows: int, grad_accum: int) -> int:
    """Rows per micro-step when ``rows`` packed rows make one optimizer step that used ``grad_accum``
    micro-steps: the largest divisor of ``rows`` not above ceil(rows / grad_accum), so the packed step
    takes about as many micro-steps as before and never a bigger micro-batch than it needs.

    >>> packed_micro_batch(3, 1), packed_micro_batch(3, 4), packed_micro_batch(6, 2)
    (3, 1, 3)
    """
    target = max(1, math.ceil(rows / grad_accum))
    return max(d for d in divisors(rows) if d <= target)


# ---------------------------------------------------------------------------------------------------------
# the ordered path


class _Path:
    """Applies the remedies in order, keeping the current setup and the steps taken."""

    def __init__(self, ev: Evaluator, initial: Setup, budget: int, time_model: TimeModel,
                 data: DataProfile | None, shape: ModelShape) -> None:
        self.ev, self.budget, self.tm, self.data, self.shape = ev, budget, time_model, data, shape
        self.initial = initial
        self.current = initial
        self.peak = ev.peak(initial)
        self.steps: list[FitStep] = []
        self.skipped: list[Skipped] = []
        self.min_saving = max(MIN_SAVING_BYTES, int(budget * MIN_SAVING_SHARE))

    @property
    def fits(self) -> bool:
        return reserved_bytes(self.peak, self.current.spec.device) <= self.budget

    def fits_setup(self, setup: Setup) -> bool:
        return self.ev.need(setup) <= self.budget

    def first_fitting(self, options: list[Setup]) -> Setup | None:
        """The first of ``options`` (least drastic first) that fits, or None."""
        for opt in options:
            if self.fits_setup(opt):
                return opt
        return None

    def take(self, action: str, setup: Setup | None, cost: str | Callable[[Setup], str], *, time_factor: float = 1.0,
             gives_up: str = "time", why_not: str = "") -> None:
        if setup is None or setup == self.current:
            self.skipped.append(Skipped(action=action, reason=why_not or "does not apply"))
            return
        peak = self.ev.peak(setup)
        saved = self.peak - peak
        if saved < self.min_saving:
            what = "nothing" if saved <= 0 else f"only {saved / 1024**2:,.1f} MiB"
            self.skipped.append(Skipped(action=action, reason=f"saves {what} here"))
            return
        text = cost(setup) if callable(cost) else cost
        self.steps.append(FitStep(action=action, setup=setup, peak_bytes=peak, saved_bytes=saved, cost=text,
                                  time_factor=time_factor, gives_up=gives_up,
                                  fits=reserved_bytes(peak, setup.spec.device) <= self.budget))
        self.current, self.peak = setup, peak


def ordered_path(path: _Path, *, allow_sharding: bool) -> None:
    """Run the ordered remedies (module docstring) on ``path`` until it fits."""
    tm, data = path.tm, path.data
    moves: list[Callable[[], None]] = [
        lambda: _longest_example(path, data),
        lambda: _attention(path),
        lambda: _checkpointing(path, tm),
        lambda: _packing(path, data),
        lambda: _micro_batch(path, tm),
        lambda: _chunked_loss(path),
        lambda: _sharding(path, tm, allow_sharding),
        lambda: _seq_len(path, data),
        lambda: _adapter(path),
        lambda: _quantize(path, tm),
        lambda: _rank(path),
    ]
    for move in moves:
        if path.fits:
            return
        move()


def _longest_example(p: _Path, data: DataProfile | None) -> None:
    s = p.current.spec
    if data is None:
        p.take("longest_example", None, "", why_not="needs --data and --tokenizer")
        return
    L = data.no_cut_seq_len()
    if L >= s.seq:
        p.take("longest_example", None, "", why_not=f"the longest example ({data.max_len} tokens) reaches seq {s.seq}")
        return
    p.take("longest_example", p.current.with_(seq=L),
           f"nothing: the longest of {data.count:,} examples has {data.max_len} tokens, so no batch is padded "
           f"beyond {L} (a multiple of 64); no example is truncated", gives_up="nothing")


def _attention(p: _Path) -> None:
    s = p.current.spec
    if s.attention != "eager":
        p.take("attention", None, "", why_not=f"already {s.attention}")
        return
    p.take("attention", p.current.with_(attention="sdpa"),
           "nothing: the same attention, computed by torch's sdpa kernel without storing the seq x seq "
           "scores (usually faster)", gives_up="nothing")


def _checkpointing(p: _Path, tm: TimeModel) -> None:
    s = p.current.spec
    if s.checkpointing == "full":
        p.take("checkpointing", None, "", why_not="already full")
        return
    f = tm.checkpointing("full") / tm.checkpointing(s.checkpointing)
    p.take("checkpointing", p.current.with_(checkpointing="full"),
           f"time only: x{f:.2f} step time ({tm.source}); set model.config.use_cache = False",
           time_factor=f)


def _micro_batch(p: _Path, tm: TimeModel) -> None:
    s = p.current.spec
    effective = s.batch * s.grad_accum
    options = [p.current.with_(batch=b, grad_accum=effective // b) for b in reversed(divisors(effective))
               if b < s.batch]
    if not options:
        p.take("micro_batch", None, "", why_not="micro-batch is already 1")
        return
    chosen = p.first_fitting(options) or options[-1]
    b = chosen.spec.batch
    f = tm.micro_batch(s.batch * s.seq, b * s.seq)
    p.take("micro_batch", chosen,
           f"a little time: x{f:.2f} (more, smaller micro-steps); nothing statistical: effective batch "
           f"{b} x {effective // b} = {effective}, as {s.batch} x {s.grad_accum}", time_factor=f)


def _chunked_loss(p: _Path) -> None:
    s = p.current.spec
    if s.loss == "chunked":
        p.take("chunked_loss", None, "", why_not="already chunked")
        return
    p.take("chunked_loss", p.current.with_(loss="chunked"),
           f"nothing statistical, ~x1.00 time: a fused linear cross-entropy (Liger Kernel or cut-cross-entropy) "
           f"never holds the {p.shape.vocab:,}-wide fp32 logits", gives_up="time")


def _packing(p: _Path, data: DataProfile | None) -> None:
    if data is None:
        p.take("packing", None, "", why_not="needs --data and --tokenizer (padding waste is a property of the data)")
        return
    if p.current.packing:
        p.take("packing", None, "", why_not="already packed")
        return
    s = p.current.spec
    examples = s.batch * s.grad_accum  # examples per optimizer step: one per unpacked row
    mean, eff = data.mean_tokens(s.seq), data.packing_efficiency(s.seq)
    exact = data.packed_rows_exact(examples, s.seq)
    rows = data.packed_rows(examples, s.seq)
    batch = packed_micro_batch(rows, s.grad_accum)
    accum = rows // batch
    setup = p.current.with_(packing=True, batch=batch, grad_accum=accum)
    cost_of = {x: setup_cost(p.initial, x, time_model=p.tm, data=data).time_factor for x in (p.current, setup)}
    f = cost_of[setup] / cost_of[p.current]
    waste_random, waste_packed = data.wastes(s.batch, s.seq)
    carried = data.examples_in_rows(rows, s.seq)
    p.take("packing", setup,
           f"time saved: x{f:.2f} (padding {100 * waste_random:.0f}% -> {100 * waste_packed:.0f}%); the effective "
           f"batch kept: {examples:,} examples x mean {mean:,.1f} tokens = {examples * mean:,.0f} tokens per "
           f"optimizer step / ({s.seq:,} x {100 * eff:.1f}% packing efficiency) = {exact:.2f} -> {rows} rows of "
           f"{s.seq:,} ({batch} x accum {accum}), carrying {carried:.1f} examples per step on average (was "
           f"{examples:,}); keep examples apart (position_ids reset) and the -100 labels: check with memfit "
           "verify-pack", time_factor=f, gives_up="nothing")


def _sharding(p: _Path, tm: TimeModel, allowed: bool) -> None:
    if not allowed:
        p.take("sharding", None, "", why_not="one GPU (pass --gpus N to shard over N)")
        return
    order = list(SHARDINGS)
    start = order.index(p.current.sharding) + 1
    options = [p.current.with_(sharding=z) for z in order[start:]]
    if not options:
        p.take("sharding", None, "", why_not="already zero3")
        return
    chosen = p.first_fitting(options) or options[-1]
    z = chosen.sharding
    sharded = {"zero1": "optimizer states", "zero2": "optimizer states and gradients",
               "zero3": "optimizer states, gradients and weights"}[z]
    f = tm.zero3_factor if z == "zero3" else 1.0
    p.take("sharding", chosen, f"time: x{f:.2f} ({'assumed, ' if z == 'zero3' else ''}communication); "
           f"{z} shards the {sharded} over {p.ev.gpus} GPUs", time_factor=f)


def _seq_len(p: _Path, data: DataProfile | None) -> None:
    s = p.current.spec
    if data is not None:
        floor = data.recommended_seq_len
        if floor >= s.seq:
            p.take("seq_len", None, "", why_not=f"seq {s.seq} is already at or below the data's p95 "
                   f"({data.p95} tokens, {floor} rounded up to 64)")
            return
    else:
        floor = max(SEQ_MULTIPLE, round_up(s.seq // 2))
        if floor >= s.seq:
            p.take("seq_len", None, "", why_not="sequence already short")
            return
    lengths = [L for L in range(round_up(s.seq) - SEQ_MULTIPLE, floor - 1, -SEQ_MULTIPLE) if L < s.seq]
    if floor not in lengths:
        lengths.append(floor)
    options = [p.current.with_(seq=L) for L in lengths]
    chosen = p.first_fitting(options) or options[-1]
    L = chosen.spec.seq
    if data is not None:
        cut = data.truncated(L)
        text = (f"changes the task: seq {s.seq} -> {L} truncates {cut:,} of {data.count:,} examples "
                f"({100 * cut / data.count:.1f}%; p95 = {data.p95} tokens)")
    else:
        text = (f"changes the task: seq {s.seq} -> {L}; share of examples truncated UNKNOWN without data "
                "(fallback rule: the longest multiple of 64 that fits, no shorter than half the sequence); "
                "check with memfit lengths DATA --tokenizer T")
    p.take("seq_len", chosen, text, gives_up="task" if data is None or data.truncated(L) else "nothing")


def _adapter(p: _Path) -> None:
    s = p.current.spec
    if s.method != "full":
        p.take("adapter", None, "", why_not=f"already {s.method}")
        return
    p.take("adapter", p.current.with_(method="lora"),
           f"quality: trains a rank-{s.rank} LoRA adapter instead of every weight", gives_up="quality")


def _quantize(p: _Path, tm: TimeModel) -> None:
    s = p.current.spec
    if s.method != "lora":
        p.take("quantize", None, "", why_not=f"method is {s.method}")
        return
    p.take("quantize", p.current.with_(method="qlora"),
           f"some quality: a 4-bit NF4 base (QLoRA); time x{tm.qlora_factor:.2f} assumed (dequantisation)",
           time_factor=tm.qlora_factor, gives_up="quality")


def _rank(p: _Path) -> None:
    s = p.current.spec
    if not s.is_adapter or s.rank <= MIN_RANK:
        p.take("rank", None, "", why_not=f"rank {s.rank} is already at most {MIN_RANK}" if s.is_adapter
               else "full fine-tuning has no rank")
        return
    ranks = []
    r = s.rank // 2
    while r >= MIN_RANK:
        ranks.append(r)
        r //= 2
    if not ranks or ranks[-1] != MIN_RANK:
        ranks.append(MIN_RANK)
    options = [p.current.with_(rank=r) for r in ranks]
    chosen = p.first_fitting(options) or options[-1]
    p.take("rank", chosen, f"capacity: rank {s.rank} -> {chosen.spec.rank} ({s.rank // chosen.spec.rank}x fewer "
           "adapter parameters); saves the least of any step", gives_up="capacity")


# ---------------------------------------------------------------------------------------------------------
# the exhaustive search


# (checkpointing, checkpoint_every): all recompute once (same time); they differ in what they keep
CHECKPOINT_OPTIONS: tuple[tuple[str, int], ...] = (("none", 2), ("full", 2), ("every-k", 2), ("sqrt", 2))


def candidates(initial: Setup, *, data: DataProfile | None, gpus: int,
               extra_seqs: tuple[int, ...] = ()) -> Iterator[Setup]:
    """Every combination of the knobs the advisor may turn (module docstring); ``extra_seqs`` adds sequence
    lengths to the grid (the ordered path's, so the search can always match the ordered path's plan)."""
    s0 = initial.spec
    ckpts = list(dict.fromkeys([(s0.checkpointing, s0.checkpoint_every), *CHECKPOINT_OPTIONS]))
    seqs = [s0.seq]
    if data is not None:
        seqs += [data.no_cut_seq_len(), data.recommended_seq_len]
    else:
        seqs += [round_up(3 * s0.seq // 4), round_up(s0.seq // 2)]
    seqs = sorted({L for L in [*seqs, *extra_seqs] if L <= s0.seq}, reverse=True)
    methods = [s0.method] + {"full": ["lora", "qlora"], "lora": ["qlora"], "qlora": []}[s0.method]
    ranks = [s0.rank]
    if s0.is_adapter:  # a full fine-tune switched to LoRA keeps the spec's rank
        r = s0.rank // 2
        while r >= MIN_RANK:
            ranks.append(r)
            r //= 2
    attentions = list(dict.fromkeys([s0.attention, "sdpa"] + (["flash"] if s0.device == "cuda" else [])))
    losses = list(dict.fromkeys([s0.loss, "chunked"]))
    shardings = list(SHARDINGS) if gpus > 1 else [initial.sharding]
    packings = [False, True] if data is not None else [initial.packing]
    rows0 = s0.batch * s0.grad_accum
    for packing, seq in product(packings, seqs):
        repack = packing and data is not None and not initial.packing
        rows = data.packed_rows(rows0, seq) if repack and data is not None else rows0
        batches = [b for b in divisors(rows) if b <= s0.batch]
        for (ck, every), b, method, rank, attn, loss, shard in product(
                ckpts, batches, methods, ranks, attentions, losses, shardings):
            try:
                spec = s0.with_(checkpointing=ck, checkpoint_every=every, batch=b, grad_accum=rows // b, seq=seq,
                                method=method, rank=rank, attention=attn, loss=loss)
            except MemfitError:
                continue
            yield Setup(spec=spec, sharding=shard, packing=packing)


def minimal_setups(initial: Setup, *, data: DataProfile | None, gpus: int,
                   extra_seqs: tuple[int, ...] = ()) -> list[Setup]:
    """The few least-memory candidates: if none of them fits, nothing does."""
    s0 = initial.spec
    cands = list(candidates(initial, data=data, gpus=gpus, extra_seqs=extra_seqs))
    min_seq = min(c.spec.seq for c in cands)
    min_rank = min(c.spec.rank for c in cands)
    most = {"qlora": 0, "lora": 1, "full": 2}
    best_method = min((c.spec.method for c in cands), key=lambda m: most[m])
    out = [c for c in cands if c.spec.batch == 1 and c.spec.seq == min_seq and c.spec.rank == min_rank
           and c.spec.method == best_method and c.spec.loss == "chunked"
           and c.spec.checkpointing in ("full", "sqrt")
           and c.sharding == (SHARDINGS[-1] if gpus > 1 else initial.sharding)]
    return out or [initial.with_(batch=1, grad_accum=s0.batch * s0.grad_accum)]


def cheapest_fit(ev: Evaluator, initial: Setup, budget: int, *, time_model: TimeModel, data: DataProfile | None,
                 progress: Callable[[int, int], None] | None = None, extra_seqs: tuple[int, ...] = ()) -> Cheapest:
    """The cheapest fitting configuration: candidates sorted by cost, estimated in that order."""
    cands = list(candidates(initial, data=data, gpus=ev.gpus, extra_seqs=extra_seqs))
    costed = sorted(((setup_cost(initial, c, time_model=time_model, data=data), c) for c in cands),
                    key=lambda pair: pair[0].key())
    n = len(costed)
    if all(ev.need(m) > budget for m in minimal_setups(initial, data=data, gpus=ev.gpus, extra_seqs=extra_seqs)):
        return Cheapest(setup=None, peak_bytes=None, cost=None, candidates=n, evaluated=ev.estimates)
    best: tuple[tuple[int, int, int], int, Setup, Cost] | None = None
    best_key = None
    for i, (cost, setup) in enumerate(costed):
        if best_key is not None and cost.key() != best_key:
            break
        peak = ev.peak(setup)
        if progress is not None and i % 64 == 0:
            progress(i, n)
        tie = (len(setup_changes(initial, setup)), _extras(initial, setup), peak)
        if ev.need(setup) <= budget and (best is None or tie < best[0]):
            best = (tie, peak, setup, cost)
            best_key = cost.key()
    if progress is not None:
        progress(n, n)
    if best is None:
        return Cheapest(setup=None, peak_bytes=None, cost=None, candidates=n, evaluated=ev.estimates)
    _, peak, setup, cost = best
    return Cheapest(setup=setup, peak_bytes=peak, cost=cost, candidates=n, evaluated=ev.estimates,
                    changes=setup_changes(initial, setup), needs=tuple(requirements(initial, setup)))


def _extras(initial: Setup, setup: Setup) -> int:
    """Changed knobs that need more than a transformers / PEFT flag: segment checkpointing (every-k, sqrt),
    flash-attn, a fused cross-entropy kernel."""
    a, b = initial.spec, setup.spec
    return (int(b.checkpointing != a.checkpointing and b.checkpointing in ("every-k", "sqrt"))
            + int(b.attention != a.attention and b.attention == "flash")
            + int(b.loss != a.loss and b.loss == "chunked"))


def requirements(initial: Setup, setup: Setup) -> list[str]:
    """What the changed knobs need beyond a flag, in the HF / PyTorch stack."""
    a, b = initial.spec, setup.spec
    out = []
    if b.checkpointing != a.checkpointing:
        if b.checkpointing == "full":
            out.append("model.gradient_checkpointing_enable(); model.config.use_cache = False")
        elif b.checkpointing in ("every-k", "sqrt"):
            k = b.checkpoint_every if b.checkpointing == "every-k" else "ceil(sqrt(L))"
            out.append(f"segment checkpointing ({k} blocks per torch.utils.checkpoint call): not what "
                       "gradient_checkpointing_enable() does, which checkpoints every block")
    if b.attention != a.attention and b.attention == "flash":
        out.append("flash-attn installed, attn_implementation='flash_attention_2'")
    if b.loss != a.loss and b.loss == "chunked":
        out.append("a fused linear cross-entropy (Liger Kernel or cut-cross-entropy)")
    if setup.packing and not initial.packing:
        out.append("packing with position_ids reset and -100 labels kept (memfit verify-pack)")
    if setup.sharding != initial.sharding and setup.sharding != "none":
        stage = setup.sharding[-1]
        fsdp = {"1": "", "2": " / FSDP SHARD_GRAD_OP", "3": " / FSDP FULL_SHARD"}[stage]
        out.append(f"DeepSpeed ZeRO stage {stage}{fsdp}")
    if b.method == "qlora" and a.method != "qlora":
        out.append("bitsandbytes (4-bit NF4)")
    return out


def setup_changes(initial: Setup, setup: Setup) -> dict[str, Any]:
    """The knobs that differ from the user's: ``{"batch": [8, 2], ...}``."""
    a, b = initial.to_dict(), setup.to_dict()
    out: dict[str, Any] = {k: [a["spec"][k], v] for k, v in b["spec"].items() if a["spec"][k] != v}
    for k in ("sharding", "packing"):
        if a[k] != b[k]:
            out[k] = [a[k], b[k]]
    return out


# ---------------------------------------------------------------------------------------------------------


def smallest_gpu(peak_bytes: int, headroom: Headroom, device: str = "cuda") -> GpuSpec | None:
    """The smallest GPU of the bundled table on which a step of ``peak_bytes`` fits with ``headroom``
    (:mod:`memfit.estimate.fits`' rule)."""
    need = reserved_bytes(peak_bytes, device)
    for g in gpu_table():
        if need <= headroom.budget(g.bytes):
            return g
    return None


def rank_lesson(ev: Evaluator, spec: RunSpec, budget: int) -> RankLesson | None:
    """Lowering only the rank, to 8, on the user's spec: bytes saved beside the activation bytes, and
    whether that alone would fit."""
    if not spec.is_adapter or spec.rank <= MIN_RANK:
        return None
    from memfit.estimate.lora import lora_trainable_params

    low = spec.with_(rank=MIN_RANK)
    est_hi, est_lo = ev.estimate(spec), ev.estimate(low)
    return RankLesson(from_rank=spec.rank, to_rank=MIN_RANK,
                      saved_bytes=int(est_hi.peak_bytes) - int(est_lo.peak_bytes),
                      activation_bytes=_activation_bytes(est_hi),
                      trainable_from=int(lora_trainable_params(ev.shape, spec)),
                      trainable_to=int(lora_trainable_params(ev.shape, low)),
                      peak_after_bytes=ev.peak(Setup(spec=low)), fits_after=ev.need(Setup(spec=low)) <= budget)


def _activation_bytes(est: Any) -> int:
    value = getattr(est, "activation_bytes", None)
    if isinstance(value, int):
        return value
    return int(est.components.get("activations", 0))


def fit(shape: ModelShape, spec: RunSpec, *, gpu: str | GpuSpec | None = None, gpus: int = 1,
        headroom: Headroom | None = None, time_model: TimeModel | None = None, data: DataProfile | None = None,
        search: bool = True, progress: Callable[[int, int], None] | None = None,
        estimate: Callable[[ModelShape, RunSpec], Any] | None = None) -> FitReport:
    """Advise how to make ``spec`` fit: the lesson's ordered path and the cheapest configuration overall.

    ``gpu`` defaults to ``spec.gpu``; ``gpus`` > 1 allows ZeRO/FSDP sharding over that many GPUs (the peak
    is then per GPU). ``estimate`` replaces :func:`memfit.estimate.estimate_memory` (tests).
    """
    if gpu is None:
        gpu = spec.gpu
    if gpu is None:
        raise MemfitError("memfit fit needs --gpu: a GPU name (memfit gpus) or a size such as 24GiB")
    if gpus < 1:
        raise MemfitError(f"--gpus must be a positive integer, got {gpus}")
    gpu_spec = gpu if isinstance(gpu, GpuSpec) else resolve_gpu(gpu)
    headroom = headroom or Headroom()
    time_model = time_model or TimeModel()
    budget = headroom.budget(gpu_spec.bytes)
    if budget <= 0:
        raise MemfitError(f"--headroom {headroom.describe()} leaves nothing of {gpu_spec.name}: lower it")
    ev = Evaluator(shape, gpus, estimate)
    initial = Setup(spec=spec)
    path = _Path(ev, initial, budget, time_model, data, shape)
    initial_peak = path.peak
    ordered_path(path, allow_sharding=gpus > 1)
    final, final_peak = path.current, path.peak
    cheapest = (cheapest_fit(ev, initial, budget, time_model=time_model, data=data, progress=progress,
                             extra_seqs=(final.spec.seq,)) if search
                else Cheapest(setup=None, peak_bytes=None, cost=None, candidates=0, evaluated=0))
    return FitReport(
        model=shape.name or "model",
        gpu=gpu_spec,
        gpus=gpus,
        headroom=headroom,
        budget_bytes=budget,
        initial=initial,
        initial_peak_bytes=initial_peak,
        steps=tuple(path.steps),
        skipped=tuple(path.skipped),
        final=final,
        final_peak_bytes=final_peak,
        final_cost=setup_cost(initial, final, time_model=time_model, data=data),
        cheapest=cheapest,
        rank_lesson=rank_lesson(ev, spec, budget),
        smallest_gpu_initial=None if path.fits_setup(initial) else smallest_gpu(initial_peak, headroom, spec.device),
        smallest_gpu_final=None if path.fits_setup(final) else smallest_gpu(final_peak, headroom, spec.device),
        time_model=time_model,
        data=data,
        fallback_seq_rule=None if data is not None else (
            "no data given: the seq_len step uses the longest multiple of 64 that fits, no shorter than half "
            "the sequence, and cannot say how many examples that truncates"),
    )
