"""``memfit fit`` when the evaluation step is the peak (issue 14): the evaluation's own knobs first
(--eval-accumulation-steps, --eval-batch, --prediction-loss-only), not training knobs that leave it unchanged."""

from __future__ import annotations

from memfit.advise import fit
from memfit.estimate import RunSpec, estimate_memory, lookup
from memfit.estimate.fits import Target

SHAPE = lookup("llama-2-7b").shape
# LoRA bf16, checkpointing, b1 s2048; evaluation: eval batch 8 with compute_metrics over 100 examples
SPEC = RunSpec(method="lora", precision="bf16", batch=1, seq=2048, checkpointing="full", eval_batch=8,
               eval_metrics=True, eval_samples=100)


def test_eval_accumulation_first_with_hand_figures() -> None:
    """Te = 8 x 2048 = 16,384 eval tokens, V = 32,000, bf16 logits: Lk = 16,384 x 32,000 x 2 = 1,048,576,000 B a
    step; ceil(100 / 8) = 13 steps kept. At the gather moment the logits held are 2k Lk + (k-1) Te x 8 (the kept
    batches, the new one and the concatenation; the kept labels): k = 13 -> 27,264,548,864 B, far past 32 GiB
    with the 13.5 GB of weights, while the training step (checkpointed) needs ~18 GiB. Halving k to 6 (the first
    option) keeps 2 x 6 Lk + 5 Te x 8: the saving is 14 Lk + 7 x 16,384 x 8 = 14,680,981,504 B, and it fits."""
    est = estimate_memory(SHAPE, SPEC)
    assert est.peak_moment == "evaluation: gather logits"
    train = estimate_memory(SHAPE, SPEC.with_(eval_batch=None, eval_metrics=False, eval_samples=None))
    target = Target.resolve("32GiB", None)
    assert target.fits(train.peak_bytes, "cuda") and not target.fits(est.peak_bytes, "cuda")
    report = fit(SHAPE, SPEC, target, search=False)
    assert [s.action for s in report.steps] == ["eval_accumulation"]
    step = report.steps[0]
    assert step.setup.spec.eval_accumulation_steps == 6 and step.fits
    assert step.saved_bytes == 14 * 1_048_576_000 + 7 * 16_384 * 8
    assert step.gives_up == "time"


def test_eval_batch_then_loss_only() -> None:
    """Without kept logits to move (eval_accumulation_steps 1 already), the eval batch is halved; where even eval
    batch 1 is too much, prediction_loss_only follows (it keeps no logits at all)."""
    spec = SPEC.with_(eval_accumulation_steps=1, eval_batch=32)
    report = fit(SHAPE, spec, Target.resolve("24GiB", None), search=False)
    actions = [s.action for s in report.steps]
    assert actions[0] == "eval_batch"
    assert next(s for s in report.skipped if s.action == "eval_accumulation").reason == "already"
    assert "checkpointing" not in actions and "micro_batch" not in actions


def test_not_the_peak_skipped() -> None:
    """A small evaluation: the training step stays the peak; the eval knobs are skipped, the usual plan runs."""
    spec = SPEC.with_(checkpointing="none", eval_batch=1, eval_samples=2, batch=4)
    report = fit(SHAPE, spec, Target.resolve("24GiB", None), search=False)
    assert {s.action: s.reason for s in report.skipped}["eval_accumulation"] == "not_eval_peak"
    assert report.steps[0].action == "checkpointing"
