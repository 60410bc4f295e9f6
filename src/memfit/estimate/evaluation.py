"""The evaluation steps the Trainer runs between training steps, and what they hold at their widest.

transformers 5.24.0 ``Trainer.evaluate`` -> ``evaluation_loop`` -> ``prediction_step`` per eval batch::

    with torch.no_grad():                              # nothing is saved for a backward
        loss, outputs = compute_loss(model, inputs, return_outputs=True)   # the logits stay in ``outputs``
    all_losses.add(loss.repeat(b)); all_preds.add(logits); all_labels.add(labels)   # EvalLoopContainer
    if eval_accumulation_steps and (step + 1) % eval_accumulation_steps == 0: to_cpu_and_numpy()

The logits are kept (``all_preds``) only when ``Trainer.evaluate`` is given a ``compute_metrics`` (it passes
``prediction_loss_only=True`` without one) and ``TrainingArguments.prediction_loss_only`` is False: memfit's
``eval_metrics`` and ``prediction_loss_only``. Kept logits stay on the GPU for ``eval_accumulation_steps`` steps,
or for the whole eval set when that is None (transformers' default). ``EvalLoopContainer.add`` concatenates
(``torch.cat`` in ``nested_concat``): at the k-th kept step the old k-1 batches, the new one and the k-batch result
are alive at once.

Under mixed precision the Trainer's model is accelerate's (1.15.0, ``Accelerator.prepare_model``: its forward is
wrapped in ``convert_outputs_to_fp32(autocast(forward))``): the logits come out of the forward as an fp32 copy, so
each kept batch is b*s*V*4 bytes (measured; memfit's own training loop has no such wrapper).

The evaluation runs after an optimizer step and ``zero_grad(set_to_none=True)``: the weights and the optimizer
states are alive, the gradients are not. With Te = eval_batch * s, logits Lb = Te*V*itemsize (the itemsize of the
training step's logits), Lk = Te*V*4 under mixed precision, else Lb, and k kept steps
(min(eval_accumulation_steps, ceil(eval_samples / eval_batch))):

=========================  ===========================================================================================
moment                     alive besides W + O
=========================  ===========================================================================================
evaluation: loss           input_ids + labels (2 Te*8), the last hidden state (Te*h), the logits (Lb), their fp32
                           copy (Te*V*4, when the logits are not fp32), the log-softmax output (Te*V*4), the padded
                           and shifted labels ((b(s+1) + Te)*8); kept: (k-1) Lk + (k-1) Te*8
evaluation: gather logits  kept logits (k-1) Lk + this step's Lk + the concatenation k Lk, kept labels (k-1) Te*8,
                           input_ids + labels (k >= 2 only; at k = 1 the container refers to the logits)
=========================  ===========================================================================================

Not modelled: the per-step losses kept on the device (4 bytes per example), a ``preprocess_logits_for_metrics``
(an argmax keeps b*s*8 instead of Lb), ``batch_eval_metrics``, ``bf16_full_eval`` (only when evaluating outside
training), a block's own no-grad transient (a few b*s*intermediate tensors, below the loss moment for any real
vocabulary). Checked against the real ``Trainer.evaluate`` on CPU (:mod:`memfit.measure.evaluation`).
"""

from __future__ import annotations

from memfit.estimate.category import Category
from memfit.estimate.constants import FP32_BYTES, INT64_BYTES
from memfit.estimate.moments import Moment
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

__all__ = ["eval_moments", "eval_summary", "kept_steps"]


def kept_steps(spec: RunSpec) -> int:
    """How many eval steps' logits are on the GPU at once: 0 without gathering, else
    min(eval_accumulation_steps, ceil(eval_samples / eval_batch)) over the ones given.

    >>> kept_steps(RunSpec(eval_batch=4, eval_metrics=True, eval_samples=10))
    3
    >>> kept_steps(RunSpec(eval_batch=4, eval_metrics=True, eval_samples=100, eval_accumulation_steps=5))
    5
    """
    if not spec.gathers_eval_logits or spec.eval_batch is None:
        return 0
    counts = [spec.eval_accumulation_steps] if spec.eval_accumulation_steps else []
    if spec.eval_samples:
        counts.append(-(-spec.eval_samples // spec.eval_batch))
    return min(counts)


def eval_moments(shape: ModelShape, spec: RunSpec, base: dict[Category, int], logits_itemsize: int,
                 hidden_itemsize: int) -> tuple[Moment, ...]:
    """The evaluation moments (module docstring) on top of ``base`` (weights + optimizer states; its inputs are
    replaced by the eval batch's); empty when ``spec.eval_batch`` is None."""
    if spec.eval_batch is None:
        return ()
    b, s, V = spec.eval_batch, spec.seq, shape.vocab
    Te = b * s
    Lb = Te * V * logits_itemsize
    Lk = Te * V * FP32_BYTES if spec.is_mixed else Lb  # accelerate's convert_outputs_to_fp32
    k = kept_steps(spec)
    held = max(0, k - 1) * (Lk + Te * INT64_BYTES)
    common = {**base, Category.INPUTS: 2 * Te * INT64_BYTES}
    upcast = Te * V * FP32_BYTES if logits_itemsize != FP32_BYTES else 0
    labels = (b * (s + 1) + Te) * INT64_BYTES
    loss = Moment(phase="evaluation", label="evaluation: loss",
                  parts={**common, Category.ACTIVATIONS: Te * shape.embed_dim * hidden_itemsize,
                         Category.LOGITS: Lb + upcast + Te * V * FP32_BYTES + labels + held})
    if k < 2:
        return (loss,)
    gather = Moment(phase="evaluation", label="evaluation: gather logits",
                    parts={**common, Category.LOGITS: 2 * k * Lk + (k - 1) * Te * INT64_BYTES})
    return (loss, gather)


def eval_summary(spec: RunSpec, moments: tuple[Moment, ...]) -> dict[str, object] | None:
    """The training and the evaluation peaks apart (None without ``eval_batch``), for the report and ``--json``."""
    if spec.eval_batch is None:
        return None
    train = max((m for m in moments if m.phase != "evaluation"), key=lambda m: m.total)
    ev = max((m for m in moments if m.phase == "evaluation"), key=lambda m: m.total)
    return {"training_peak_bytes": train.total, "training_moment": train.label, "eval_peak_bytes": ev.total,
            "eval_moment": ev.label, "kept_steps": kept_steps(spec),
            "gathers_logits": spec.gathers_eval_logits}
