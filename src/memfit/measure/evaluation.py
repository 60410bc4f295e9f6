"""The memory of the Trainer's evaluation, measured: a real ``Trainer.evaluate`` (transformers 5.24.0) after one
real training step, under the live-storage tracker.

The model is memfit's (:func:`memfit.runtime.build.build_model`); the Trainer's arguments say what the spec says
(``per_device_eval_batch_size``, ``prediction_loss_only``, ``eval_accumulation_steps``, ``bf16``/``fp16`` for mixed
precision, ``optim="adamw_torch"`` as :mod:`memfit.measure.trainer`); ``eval_metrics`` passes a ``compute_metrics``
(without one ``Trainer.evaluate`` keeps no logits). The eval set is ``eval_samples`` examples of exactly ``seq``
random tokens (or ``eval_batch x max(2, eval_accumulation_steps)`` when the spec gives no size). One training step
runs first, untracked, so that the optimizer states exist and the gradients have been set to None, as between two
training steps; then the tracker, told about the weights and the optimizer states, follows ``evaluate()``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.category import Category
from memfit.estimate.spec import RunSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalMeasurement:
    """The peak of live bytes during ``Trainer.evaluate`` (weights and optimizer states included), by category."""

    peak_bytes: int
    by_category: dict[Category, int]
    eval_steps: int


def measure_eval(config: dict[str, Any], spec: RunSpec, *, device: str = "cpu", seed: int = 0) -> EvalMeasurement:
    """Measure the evaluation of ``spec`` (``spec.eval_batch`` set) through the real Trainer; module docstring."""
    if spec.eval_batch is None:
        raise MemfitError("measuring the evaluation needs --eval-batch N")
    if spec.optimizer != "adamw":
        raise MemfitError("the evaluation is measured with --optimizer adamw (the Trainer's adamw_torch)")
    import torch
    from transformers import Trainer, TrainingArguments, default_data_collator

    from memfit.measure.trainer import trainer_dataset
    from memfit.runtime.build import build_model
    from memfit.runtime.tracker import LiveTensorTracker

    vocab = int(config.get("vocab_size") or 0)
    if vocab < 3:
        raise MemfitError("the config has no vocab_size: add it to config.json")
    torch.manual_seed(seed)
    model = build_model(config, spec, device=device)
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="memfit-eval-"), per_device_train_batch_size=spec.batch,
        per_device_eval_batch_size=spec.eval_batch, prediction_loss_only=spec.prediction_loss_only,
        eval_accumulation_steps=spec.eval_accumulation_steps, max_steps=1, use_cpu=device != "cuda", report_to=[],
        save_strategy="no", logging_strategy="no", eval_strategy="no", disable_tqdm=True, optim="adamw_torch",
        seed=seed, bf16=spec.precision == "mixed-bf16", fp16=spec.precision == "mixed-fp16",
        dataloader_num_workers=0)
    examples = spec.eval_samples or spec.eval_batch * max(2, spec.eval_accumulation_steps or 0)
    metrics = (lambda p: {"kept": float(len(p.predictions))}) if spec.eval_metrics else None
    trainer = Trainer(model=model, args=args, data_collator=default_data_collator, compute_metrics=metrics,
                      train_dataset=trainer_dataset(examples=spec.batch, seq=spec.seq, vocab=vocab, seed=seed),
                      eval_dataset=trainer_dataset(examples=examples, seq=spec.seq, vocab=vocab, seed=seed + 1))
    trainer.train()
    tracker = LiveTensorTracker(vocab=vocab)
    tracker.track_model(model)
    tracker.track_optimizer(trainer.optimizer)
    with tracker:
        trainer.evaluate()
    summary = tracker.summary()
    return EvalMeasurement(peak_bytes=int(summary["peak_bytes"]),
                           by_category={k: int(v) for k, v in summary["by_category"].items()},
                           eval_steps=-(-examples // spec.eval_batch))
