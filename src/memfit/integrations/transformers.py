"""memfit inside the training run: :class:`MemfitCallback`, a ``transformers.TrainerCallback``.

It works wherever the Hugging Face Trainer runs (TRL's ``SFTTrainer``, axolotl and LLaMA-Factory build on
it)::

    from memfit.integrations.transformers import MemfitCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemfitCallback(gpu="24GiB")])

What it does (transformers 5.24.0 ``Trainer._inner_training_loop``; TRL 1.16.0):

``on_train_begin`` (after the Trainer applied checkpointing and built the optimizer, before the data loader
yields its first batch): the :class:`~memfit.estimate.spec.RunSpec` of the live objects
(:meth:`RunSpec.from_training_args <memfit.estimate.spec.RunSpec.from_training_args>` on the
``TrainingArguments`` / ``SFTConfig``, the model's config with the dtype it was loaded in, the attention kernel
in use and its quantization config, and the PEFT config actually applied to the model), and the peak of the
*longest* batch the data loader can yield (:func:`longest_batch`: with packing or padding-free, full rows;
with padding, the longest example times the micro-batch). With a GPU (``gpu="24GiB"``, or the CUDA device's
own size) it judges the fit by the rule ``memfit estimate --gpu`` prints; if the run does not fit it logs the
``memfit fit`` plan in the framework's own fields (``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``gradient_checkpointing``, ...) and, with ``stop_if_oom=True``, raises
:class:`WouldNotFit` (a :class:`~memfit.errors.MemfitError`) before the first step.

The first ``measure_steps`` optimizer steps (default 2: the first allocates the optimizer state, the second
is a steady step): on CUDA ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` (peak statistics
reset at ``on_train_begin``); on the CPU, with ``measure_cpu=True`` (it slows those steps), memfit's
live-storage tracker (:class:`~memfit.runtime.tracker.LiveTensorTracker`), entered at ``on_step_begin`` and left
at ``on_step_end`` with the same phases as memfit's own loop (forward / backward / optimizer), the batch
counted from the model's forward. Then it logs, through the Trainer's ``log`` (so they reach the console,
TensorBoard / W&B and ``trainer.state.log_history``), ``memfit/predicted_peak_bytes`` (the prediction for the
largest batch actually seen), ``memfit/measured_peak_bytes`` and ``memfit/ratio`` (measured / predicted), and
warns when they differ by more than ``tolerance`` (10%), naming the likely cause (:func:`diagnose`).

Modelled differences between the Trainer's step and memfit's loop (:mod:`memfit.estimate.trainer`):

- ``optim="adamw_torch_fused"`` (the Trainer's default on torch >= 2.8): the fused kernel allocates no
  temporaries at the optimizer step; the estimate's optimizer moment models torch's for-each / for-loop
  AdamW, so the callback removes that moment's temporaries when the live optimizer is fused.
- TRL 1.16's ``SFTTrainer`` computes its loss through a fused LM head (``trl.trainer.utils.add_fused_lm_head``:
  a chunked log-probability kernel that never holds the (b, s, V) logits); memfit predicts it with
  ``loss="chunked"`` with TRL's own head at the loss (:func:`memfit.estimate.trainer.trl_head_bytes`), not
  Liger's.

The run, the longest batch, the prediction, the plan and the diagnosis are in :mod:`memfit.integrations.run`;
the measurement of the Trainer's steps in :mod:`memfit.runtime.trainer_step`.

Nothing of this module is imported by ``import memfit``.
"""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

from transformers import TrainerCallback

from memfit.errors import MemfitError
from memfit.estimate import Target
from memfit.integrations.run import (
    BatchShape,
    Prediction,
    applied_peft_config,
    config_dict,
    describe,
    diagnose,
    example_lengths,
    framework_fields,
    gib,
    live_spec,
    longest_batch,
    optimizer_is_fused,
    plan_lines,
    predict,
    unwrap,
    uses_trl_head,
)

logger = logging.getLogger("memfit")

__all__ = ["BatchShape", "MemfitCallback", "Prediction", "WouldNotFit", "applied_peft_config", "diagnose",
           "example_lengths", "framework_fields", "live_spec", "longest_batch", "predict"]

TOLERANCE = 0.10


class WouldNotFit(MemfitError):
    """Raised from ``on_train_begin`` with ``stop_if_oom=True`` when the longest batch's step does not fit the
    GPU; the message holds the verdict and the plan, ``prediction`` the numbers."""

    def __init__(self, message: str, prediction: Prediction) -> None:
        super().__init__(message)
        self.prediction = prediction


class MemfitCallback(TrainerCallback):
    """Predict the peak of the longest batch at ``on_train_begin``, check it against the first steps, warn.

    Args:
        gpu: the GPU to judge the fit against (``"24GiB"``, ``"A100-80GB"``, a name of ``memfit gpus``); default:
            the CUDA device's own size when training on CUDA, no judgement on the CPU.
        headroom: kept free on the GPU (``memfit estimate --headroom``), default 5%.
        stop_if_oom: raise :class:`WouldNotFit` from ``on_train_begin`` when the longest batch does not fit.
        measure_steps: the optimizer steps measured (default 2; 0 turns the measurement off).
        measure_cpu: on the CPU, track live storages through those steps (slower steps; off by default).
        tolerance: warn when measured and predicted differ by more than this fraction (default 0.10).
    """

    def __init__(self, gpu: str | None = None, *, headroom: str | float | None = None, stop_if_oom: bool = False,
                 measure_steps: int = 2, measure_cpu: bool = False, tolerance: float = TOLERANCE) -> None:
        if measure_steps < 0:
            raise MemfitError(f"measure_steps must be 0 or more; got {measure_steps}")
        self.gpu = gpu
        self.headroom = headroom
        self.stop_if_oom = stop_if_oom
        self.measure_steps = measure_steps
        self.measure_cpu = measure_cpu
        self.tolerance = tolerance
        self.prediction: Prediction | None = None  # the longest batch (on_train_begin)
        self.measured: dict[str, Any] | None = None  # after the measured steps
        self.warnings: list[str] = []
        self._reset()
        if gpu is not None:
            Target.resolve(gpu, headroom)  # a bad size fails here, not at train time

    def _reset(self) -> None:
        from memfit.runtime.trainer_step import StepRecorder

        self._trainer: Any = None
        self._config: dict[str, Any] = {}
        self._spec: Any = None
        self._fused = self._trl_head = False
        self._recorder: StepRecorder | None = None

    # -- on_train_begin --------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> Any:
        try:
            return self._train_begins(args, state, control, model, optimizer, train_dataloader)
        except WouldNotFit:
            raise
        except Exception as exc:  # a memory check must not end the user's run: say why, train on
            why = (str(exc) if isinstance(exc, MemfitError)
                   else f"{type(exc).__name__}: {exc} (a memfit bug: please report)")
            message = f"memfit: no prediction for this run: {why}"
            self.warnings.append(message)
            logger.warning(message)
            self._reset()
            return control

    def _train_begins(self, args: Any, state: Any, control: Any, model: Any, optimizer: Any,
                      train_dataloader: Any) -> Any:
        self._reset()
        self._trainer = _find_trainer(self)
        model = unwrap(model)
        self._config = config_dict(model)
        self._spec = spec = live_spec(args, model)
        self._fused = optimizer_is_fused(optimizer)
        self._trl_head = uses_trl_head(args)
        positions = self._config.get("max_position_embeddings") or self._config.get("n_positions")
        shape = longest_batch(args, train_dataloader, max_positions=positions)
        self.prediction = p = predict(self._config, spec, shape, fused_optimizer=self._fused, trl_head=self._trl_head)
        target = self._target(spec.device)
        fits = target is None or target.judge(p.peak_bytes, spec.device, reserved=p.reserved_bytes).fits
        lines = [f"memfit: predicted peak {gib(p.peak_bytes)} ({p.peak_bytes:,} B) at {p.peak_moment} for the "
                 f"longest batch, {shape.how}; run: {describe(p.spec)}"]
        if target is not None:
            verdict = target.judge(p.peak_bytes, spec.device, reserved=p.reserved_bytes)
            lines.append(f"memfit: {'fits' if fits else 'does not fit'}: {verdict.rule()}")
            if not fits:
                lines.append(f"memfit fit, in {type(args).__name__}'s terms:")
                lines.extend(plan_lines(args, self._config, p, target))
        for line in lines:
            (logger.info if fits else logger.warning)(line)
        if not fits:
            self.warnings.append("\n".join(lines))
            if self.stop_if_oom:
                control.should_training_stop = True
                raise WouldNotFit("\n".join(lines) + "\nstopped before the first step (MemfitCallback(stop_if_oom="
                                  "True))", p)
        self._log({"memfit/predicted_longest_batch_peak_bytes": p.peak_bytes}, state)
        if self.measure_steps and (spec.device == "cuda" or self.measure_cpu):
            from memfit.runtime.trainer_step import StepRecorder

            vocab = int(self._config.get("vocab_size") or 0) or None
            self._recorder = StepRecorder(device=spec.device, steps=self.measure_steps, vocab=vocab)
            self._recorder.start(model, optimizer)
        elif self.measure_steps:
            logger.info("memfit: not measuring the first steps on the CPU: MemfitCallback(measure_cpu=True) tracks "
                        "them (slower steps)")
        return control

    def _target(self, device: str) -> Target | None:
        if self.gpu is not None:
            return Target.resolve(self.gpu, self.headroom)
        if device == "cuda":
            import torch

            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            return Target.resolve(f"{total}B", self.headroom)
        return None

    # -- the measured steps ------------------------------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._recorder is not None:
            self._recorder.step_begins()
        return control

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._recorder is not None:
            self._recorder.pre_optimizer()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        if self._recorder is not None and self._recorder.step_ends():
            self._report(args, state, model)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._recorder is not None and not self._recorder.done:
            self._recorder.stop()
        return control

    def _report(self, args: Any, state: Any, model: Any) -> None:
        rec = self._recorder
        assert rec is not None and self._spec is not None
        if rec.seen.batch == 0:
            return
        b, s = rec.seen.batch, rec.seen.seq
        seen = BatchShape(batch=b, seq=s, padding_mask=rec.seen.padding_mask,
                          how=f"the largest batch of the first {rec.done_steps} steps, {b} x {s}")
        p = predict(self._config, self._spec, seen, fused_optimizer=self._fused, trl_head=self._trl_head)
        result = rec.result()
        measured, reserved = result["measured_peak_bytes"], result["measured_reserved_bytes"]
        ratio = measured / p.peak_bytes if p.peak_bytes else float("nan")
        self.measured = {**result, "predicted_peak_bytes": p.peak_bytes, "ratio": ratio, "prediction": p}
        logs: dict[str, float] = {"memfit/predicted_peak_bytes": p.peak_bytes, "memfit/measured_peak_bytes": measured,
                                  "memfit/ratio": round(ratio, 4)}
        if reserved is not None:
            logs["memfit/predicted_reserved_bytes"] = p.reserved_bytes
            logs["memfit/measured_reserved_bytes"] = reserved
        self._log(logs, state)
        line = (f"memfit: measured peak {gib(measured)} ({measured:,} B) over the first {rec.done_steps} steps, "
                f"predicted {gib(p.peak_bytes)} ({p.peak_bytes:,} B) for {seen.batch} x {seen.seq}: ratio {ratio:.3f}")
        if not math.isfinite(ratio) or abs(ratio - 1) > self.tolerance:
            causes = diagnose(model, args, p, measured, result["by_category"])
            message = (line + f", more than {self.tolerance:.0%} off; likely: " + causes[0] +
                       "".join(f"; also: {c}" for c in causes[1:]))
            self.warnings.append(message)
            logger.warning(message)
        else:
            logger.info(line)

    def _log(self, logs: dict[str, float], state: Any) -> None:
        """Through ``transformers.Trainer.log`` (the log history and every reporting callback's ``on_log``); the
        base class's, not a subclass's: TRL's ``SFTTrainer.log`` would flush its running metrics into this entry."""
        from transformers import Trainer

        if isinstance(self._trainer, Trainer):
            Trainer.log(self._trainer, dict(logs))
        elif state is not None:
            state.log_history.append({**logs, "step": getattr(state, "global_step", 0)})


def _find_trainer(callback: MemfitCallback) -> Any:
    """The Trainer running ``callback``: the ``self`` of the frame that called the callback handler (callbacks
    are handed no Trainer; its ``log`` is how metrics reach every reporting integration and the log history)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            handler = getattr(owner, "callback_handler", None)
            if handler is not None and callback in getattr(handler, "callbacks", ()):
                return owner
            frame = frame.f_back
    finally:
        del frame
    return None
