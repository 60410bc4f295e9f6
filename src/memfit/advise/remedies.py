"""The remedies the advisor may apply, as data, in the order the ordered plan tries them (:data:`REMEDY_ORDER`).

"When a run does not fit, in order of what you give up" (lesson 7):

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
well, the padding no longer processed); after step 2 ``chunked_loss`` (fused linear cross-entropy: no full
fp32 logits) and ``sharding`` over the spec's ``gpus`` (ZeRO-1/2/3, the least that fits).

A :class:`Remedy` proposes options (least drastic first; the plan takes the first that fits, else the last)
or says why it does not apply, and describes the step it made as an :class:`Effect`: what it gives up, its
time factor and the figures its sentence is written from (:func:`memfit.report.fit.step_cost`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memfit.advise.costs import GivesUp, TimeModel, setup_cost
from memfit.advise.profile import DataProfile
from memfit.advise.result import SkipReason
from memfit.advise.setup import Setup
from memfit.estimate import MemoryEstimate, ModelShape, RunSpec, estimate_memory
from memfit.estimate.adapter import fused_loss_modelled
from memfit.estimate.constants import SEQ_MULTIPLE, seq_round_up
from memfit.estimate.sharding import LADDER, communication_bytes, nodes_needed

MIN_RANK = 8  # the lesson's "64 -> 8"; the rank remedy never goes below it


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What a remedy reads besides the current setup."""

    initial: Setup
    time_model: TimeModel
    data: DataProfile | None
    shape: ModelShape
    # the plan's memoised estimator (fit passes its PeakCache's); None: estimate_memory on ``shape``
    estimator: Callable[[RunSpec], MemoryEstimate] | None = None

    def estimate(self, spec: RunSpec) -> MemoryEstimate:
        """The estimate of ``spec``: through the plan's memo when one was given."""
        return self.estimator(spec) if self.estimator is not None else estimate_memory(self.shape, spec)


@dataclass(frozen=True, kw_only=True, slots=True)
class NotApplicable:
    """Why a remedy proposes nothing here."""

    reason: SkipReason
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Effect:
    """What a step gave up and cost, with the figures of its sentence."""

    gives_up: GivesUp
    time_factor: float = 1.0
    facts: Mapping[str, Any] = field(default_factory=dict)


Options = tuple[Setup, ...] | NotApplicable


@dataclass(frozen=True, kw_only=True, slots=True)
class Remedy:
    """One change the ordered plan may make: its name, the knob it turns, what it gives up at most,
    ``options(current, ctx)`` and ``effect(before, after, ctx)``."""

    name: str
    knob: tuple[str, ...]  # the RunSpec fields (or ``packing``) it changes
    gives_up: GivesUp
    options: Callable[[Setup, Context], Options]
    effect: Callable[[Setup, Setup, Context], Effect]


# ---- knob arithmetic shared with the search ---------------------------------------------------------------


def divisors(n: int) -> list[int]:
    """All divisors of n, ascending.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def halved_ranks(rank: int, floor: int = MIN_RANK) -> list[int]:
    """rank/2, rank/4, ... while at least ``floor``.

    >>> halved_ranks(64), halved_ranks(48), halved_ranks(8)
    ([32, 16, 8], [24, 12], [])
    """
    out = []
    r = rank // 2
    while r >= floor:
        out.append(r)
        r //= 2
    return out


def packed_micro_batch(rows: int, grad_accum: int) -> int:
    """Rows per micro-step when ``rows`` packed rows make one optimizer step that used ``grad_accum``
    micro-steps: the largest divisor of ``rows`` not above ceil(rows / grad_accum), so the packed step
    takes about as many micro-steps as before and never a bigger micro-batch than it needs.

    >>> packed_micro_batch(3, 1), packed_micro_batch(3, 4), packed_micro_batch(6, 2)
    (3, 1, 3)
    """
    target = max(1, math.ceil(rows / grad_accum))
    return max(d for d in divisors(rows) if d <= target)


# ---- the remedies ------------------------------------------------------------------------------------------


def _longest_example(cur: Setup, ctx: Context) -> Options:
    if ctx.data is None:
        return NotApplicable(reason="needs_data")
    L = ctx.data.no_cut_seq_len()
    if L >= cur.spec.seq:
        return NotApplicable(reason="longest_reaches_seq", facts={"longest": ctx.data.max_len, "seq": cur.spec.seq})
    return (cur.with_(seq=L),)


def _longest_example_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    data = ctx.data
    assert data is not None  # options() proposed nothing without data
    return Effect(gives_up="nothing", facts={"examples": data.count, "longest": data.max_len, "seq": after.spec.seq})


def _attention(cur: Setup, ctx: Context) -> Options:
    if cur.spec.attention != "eager":
        return NotApplicable(reason="already", facts={"value": cur.spec.attention})
    if "sdpa" not in ctx.shape.arch.attention_kernels:  # Gemma 2, GPT-OSS: eager (or flash) only
        return NotApplicable(reason="no_kernel", facts={"value": "sdpa", "model_type": ctx.shape.model_type})
    return (cur.with_(attention="sdpa"),)


def _checkpointing(cur: Setup, ctx: Context) -> Options:
    if cur.spec.checkpointing == "full":
        return NotApplicable(reason="already", facts={"value": "full"})
    return (cur.with_(checkpointing="full"),)


def _checkpointing_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    tm = ctx.time_model
    f = tm.checkpointing("full") / tm.checkpointing(before.spec.checkpointing)
    return Effect(gives_up="time", time_factor=f, facts={"from": before.spec.checkpointing, "to": "full"})


def _micro_batch(cur: Setup, ctx: Context) -> Options:
    s = cur.spec
    effective = s.batch * s.grad_accum
    options = tuple(cur.with_(batch=b, grad_accum=effective // b) for b in reversed(divisors(effective))
                    if b < s.batch)
    return options or NotApplicable(reason="micro_batch_one")


def _micro_batch_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    s, b = before.spec, after.spec.batch
    effective = s.batch * s.grad_accum
    f = ctx.time_model.micro_batch(s.batch * s.seq, b * s.seq)
    return Effect(gives_up="time", time_factor=f,
                  facts={"batch": b, "grad_accum": effective // b, "effective": effective, "from_batch": s.batch,
                         "from_grad_accum": s.grad_accum})


def _chunked_loss(cur: Setup, ctx: Context) -> Options:
    if cur.spec.loss in ("chunked", "trl"):  # trl: TRL's own fused head, no (b, s, V) logits either
        return NotApplicable(reason="already", facts={"value": "chunked" if cur.spec.loss == "chunked" else
                                                      "TRL's fused LM head"})
    if not fused_loss_modelled(ctx.shape, cur.spec):
        return NotApplicable(reason="not_modelled", facts={"value": "a chunked loss",
                                                           "why": "--trainable-tokens on tied embeddings"})
    return (cur.with_(loss="chunked"),)


def _packing(cur: Setup, ctx: Context) -> Options:
    data = ctx.data
    if data is None:
        return NotApplicable(reason="needs_data")
    if cur.packing:
        return NotApplicable(reason="already", facts={"value": "packed"})
    s = cur.spec
    rows = data.packed_rows(s.batch * s.grad_accum, s.seq)  # one example per unpacked row
    batch = packed_micro_batch(rows, s.grad_accum)
    return (cur.with_(packing=True, batch=batch, grad_accum=rows // batch),)


def _packing_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    data = ctx.data
    assert data is not None  # options() proposed nothing without data
    s = before.spec
    examples = s.batch * s.grad_accum  # examples per optimizer step: one per unpacked row
    cost_of = {x: setup_cost(ctx.initial, x, time_model=ctx.time_model, data=data).time_factor
               for x in (before, after)}
    waste_random, waste_packed = data.wastes(s.batch, s.seq)
    rows = after.spec.batch * after.spec.grad_accum
    return Effect(gives_up="nothing", time_factor=cost_of[after] / cost_of[before], facts={
        "waste_random": waste_random, "waste_packed": waste_packed, "examples": examples,
        "mean_tokens": data.mean_tokens(s.seq), "seq": s.seq, "efficiency": data.packing_efficiency(s.seq),
        "rows_exact": data.packed_rows_exact(examples, s.seq), "rows": rows, "batch": after.spec.batch,
        "grad_accum": after.spec.grad_accum, "examples_carried": data.examples_in_rows(rows, s.seq)})


def _sharding(cur: Setup, ctx: Context) -> Options:
    if cur.spec.gpus == 1:
        return NotApplicable(reason="one_gpu")
    if cur.spec.sharding not in LADDER:  # ddp / fsdp / hsdp: the user chose the scheme; zero3 is fsdp's memory
        return NotApplicable(reason="already", facts={"value": cur.spec.sharding})
    options = tuple(cur.with_(sharding=z) for z in LADDER[LADDER.index(cur.spec.sharding) + 1:])
    return options or NotApplicable(reason="already", facts={"value": LADDER[-1]})


def _sharding_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    z = after.spec.sharding
    f = ctx.time_model.zero3_factor if z == "zero3" else 1.0
    comm = communication_bytes(ctx.shape, after.spec)
    return Effect(gives_up="time", time_factor=f, facts={"stage": z, "gpus": after.spec.gpus, **comm,
                                                          "nodes": nodes_needed(after.spec),
                                                          **({"gpus_per_node": after.spec.gpus_per_node}
                                                             if after.spec.gpus_per_node else {})})


def _seq_len(cur: Setup, ctx: Context) -> Options:
    s, data = cur.spec, ctx.data
    if data is not None:
        floor = data.recommended_seq_len
        if floor >= s.seq:
            return NotApplicable(reason="at_p95", facts={"seq": s.seq, "p95": data.p95, "floor": floor})
    else:
        floor = max(SEQ_MULTIPLE, seq_round_up(s.seq // 2))
        if floor >= s.seq:
            return NotApplicable(reason="too_short")
    lengths = [L for L in range(seq_round_up(s.seq) - SEQ_MULTIPLE, floor - 1, -SEQ_MULTIPLE) if L < s.seq]
    if floor not in lengths:
        lengths.append(floor)
    return tuple(cur.with_(seq=L) for L in lengths)


def _seq_len_effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    data, L = ctx.data, after.spec.seq
    facts: dict[str, Any] = {"from_seq": before.spec.seq, "to_seq": L}
    if data is None:
        return Effect(gives_up="task", facts=facts | {"truncated": None})
    cut = data.truncated(L)
    return Effect(gives_up="task" if cut else "nothing",
                  facts=facts | {"truncated": cut, "examples": data.count, "p95": data.p95})


def _adapter(cur: Setup, ctx: Context) -> Options:
    if cur.spec.method != "full":
        return NotApplicable(reason="already", facts={"value": cur.spec.method})
    return (cur.with_(method="lora"),)


def _quantize(cur: Setup, ctx: Context) -> Options:
    if cur.spec.method not in ("lora", "int8-lora"):
        return NotApplicable(reason="method", facts={"value": cur.spec.method})
    return (cur.with_(method="qlora"),)


def _rank(cur: Setup, ctx: Context) -> Options:
    s = cur.spec
    if not s.is_adapter:
        return NotApplicable(reason="no_rank")
    if s.rank <= MIN_RANK:
        return NotApplicable(reason="at_min_rank", facts={"rank": s.rank, "min_rank": MIN_RANK})
    ranks = halved_ranks(s.rank)
    if not ranks or ranks[-1] != MIN_RANK:
        ranks.append(MIN_RANK)
    return tuple(cur.with_(rank=r) for r in ranks)


def _fixed(gives_up: GivesUp, facts: Callable[[Setup, Setup, Context], dict[str, Any]] | None = None,
           time: Callable[[Context], float] | None = None) -> Callable[[Setup, Setup, Context], Effect]:
    """An effect that gives up ``gives_up`` at ``time``'s factor, with ``facts``."""

    def effect(before: Setup, after: Setup, ctx: Context) -> Effect:
        return Effect(gives_up=gives_up, time_factor=time(ctx) if time else 1.0,
                      facts=facts(before, after, ctx) if facts else {})

    return effect


LONGEST_EXAMPLE = Remedy(name="longest_example", knob=("seq",), gives_up="nothing", options=_longest_example,
                         effect=_longest_example_effect)
ATTENTION = Remedy(name="attention", knob=("attention",), gives_up="nothing", options=_attention,
                   effect=_fixed("nothing", lambda b, a, c: {"from": b.spec.attention, "to": a.spec.attention}))
CHECKPOINTING = Remedy(name="checkpointing", knob=("checkpointing",), gives_up="time", options=_checkpointing,
                       effect=_checkpointing_effect)
PACKING = Remedy(name="packing", knob=("packing", "batch", "grad_accum"), gives_up="nothing", options=_packing,
                 effect=_packing_effect)
MICRO_BATCH = Remedy(name="micro_batch", knob=("batch", "grad_accum"), gives_up="time", options=_micro_batch,
                     effect=_micro_batch_effect)
CHUNKED_LOSS = Remedy(name="chunked_loss", knob=("loss",), gives_up="time", options=_chunked_loss,
                      effect=_fixed("time", lambda b, a, c: {"vocab": c.shape.vocab}))
SHARDING = Remedy(name="sharding", knob=("sharding",), gives_up="time", options=_sharding, effect=_sharding_effect)
SEQ_LEN = Remedy(name="seq_len", knob=("seq",), gives_up="task", options=_seq_len, effect=_seq_len_effect)
ADAPTER = Remedy(name="adapter", knob=("method",), gives_up="quality", options=_adapter,
                 effect=_fixed("quality", lambda b, a, c: {"rank": b.spec.rank}))
QUANTIZE = Remedy(name="quantize", knob=("method",), gives_up="quality", options=_quantize,
                  effect=_fixed("quality", time=lambda c: c.time_model.qlora_factor))
RANK = Remedy(name="rank", knob=("rank",), gives_up="capacity", options=_rank,
              effect=_fixed("capacity", lambda b, a, c: {"from_rank": b.spec.rank, "to_rank": a.spec.rank}))

REMEDY_ORDER: tuple[Remedy, ...] = (LONGEST_EXAMPLE, ATTENTION, CHECKPOINTING, PACKING, MICRO_BATCH, CHUNKED_LOSS,
                                    SHARDING, SEQ_LEN, ADAPTER, QUANTIZE, RANK)
"""The order the plan tries them: what is given up, least first (module docstring)."""
