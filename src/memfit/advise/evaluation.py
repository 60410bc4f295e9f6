"""Remedies for a run whose peak is the evaluation step, not the training step (issue 14).

transformers 5.24.0 ``Trainer.evaluate`` keeps every eval step's logits on the GPU when a ``compute_metrics`` is
given (:mod:`memfit.estimate.evaluation`): k steps of ``eval_batch x seq x V`` logits, concatenated. No training
knob touches that (checkpointing, the micro-batch, a chunked loss: the evaluation runs under no_grad with its own
batch), so when an evaluation moment is the peak the plan first turns the evaluation's own knobs, least given up
first, each with the bytes the estimate says it saves:

1. ``eval_accumulation``: ``--eval-accumulation-steps N`` (N = k/2, k/4, ..., 1), the kept logits copied to the
   host every N steps: a little evaluation time, nothing else.
2. ``eval_batch``: a smaller ``--eval-batch`` (halved down to 1): more, smaller evaluation steps.
3. ``prediction_loss_only``: ``--prediction-loss-only``: no logits kept, so ``compute_metrics`` gets none: the
   metrics are given up, the eval loss is kept.

The training remedies that follow then save nothing at an evaluation peak and are skipped by the plan's
smallest-saving rule, unless they lower it too (a shorter sequence, a 4-bit base: the evaluation holds them).
"""

from __future__ import annotations

from memfit.advise.remedies import Context, Effect, NotApplicable, Options, Remedy
from memfit.advise.setup import Setup
from memfit.estimate.evaluation import kept_steps


def eval_is_peak(cur: Setup, ctx: Context) -> bool:
    """Whether ``cur``'s peak moment is an evaluation moment (``"evaluation: ..."``)."""
    return cur.spec.eval_batch is not None and ctx.estimate(cur.spec).peak_moment.startswith("evaluation")


def _halvings(n: int) -> list[int]:
    """n/2, n/4, ..., 1 (n >= 2), descending."""
    out, v = [], n // 2
    while v >= 1:
        out.append(v)
        v //= 2
    if out and out[-1] != 1:
        out.append(1)
    return out


def _eval_accumulation(cur: Setup, ctx: Context) -> Options:
    if not eval_is_peak(cur, ctx):
        return NotApplicable(reason="not_eval_peak")
    k = kept_steps(cur.spec)
    if k < 2:
        return NotApplicable(reason="already", facts={"value": f"{k} eval step's logits kept"})
    return tuple(cur.with_(eval_accumulation_steps=n) for n in _halvings(k))


def _eval_batch(cur: Setup, ctx: Context) -> Options:
    if not eval_is_peak(cur, ctx):
        return NotApplicable(reason="not_eval_peak")
    b = cur.spec.eval_batch or 1
    if b < 2:
        return NotApplicable(reason="already", facts={"value": "eval batch 1"})
    return tuple(cur.with_(eval_batch=n) for n in _halvings(b))


def _prediction_loss_only(cur: Setup, ctx: Context) -> Options:
    if not eval_is_peak(cur, ctx):
        return NotApplicable(reason="not_eval_peak")
    if not cur.spec.gathers_eval_logits:
        return NotApplicable(reason="already", facts={"value": "no logits kept"})
    return (cur.with_(prediction_loss_only=True),)


def _effect(before: Setup, after: Setup, ctx: Context) -> Effect:
    b, a = before.spec, after.spec
    facts = {"from_kept": kept_steps(b), "to_kept": kept_steps(a), "from_eval_batch": b.eval_batch,
             "to_eval_batch": a.eval_batch, "eval_accumulation_steps": a.eval_accumulation_steps}
    return Effect(gives_up="task" if a.prediction_loss_only and not b.prediction_loss_only else "time", facts=facts)


EVAL_ACCUMULATION = Remedy(name="eval_accumulation", knob=("eval_accumulation_steps",), gives_up="time",
                           options=_eval_accumulation, effect=_effect)
EVAL_BATCH = Remedy(name="eval_batch", knob=("eval_batch",), gives_up="time", options=_eval_batch, effect=_effect)
PREDICTION_LOSS_ONLY = Remedy(name="prediction_loss_only", knob=("prediction_loss_only",), gives_up="task",
                              options=_prediction_loss_only, effect=_effect)

EVAL_REMEDIES: tuple[Remedy, ...] = (EVAL_ACCUMULATION, EVAL_BATCH, PREDICTION_LOSS_ONLY)
"""Tried before the training remedies when the run evaluates (``eval_batch`` set)."""
