"""Measure the first optimizer steps of a Hugging Face Trainer's own loop (transformers 5.24.0
``Trainer._run_epoch``), what :class:`~memfit.integrations.transformers.MemfitCallback` and ``memfit measure
--trainer`` run.

The Trainer calls, per optimizer step, ``on_step_begin``, then for each micro-batch ``training_step`` (forward,
backward), then ``on_pre_optimizer_step``, ``optimizer.step()``, ``model.zero_grad()`` and ``on_step_end``. The
recorder follows: on CUDA the allocator's peak (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``,
statistics reset at :meth:`StepRecorder.start`); on the CPU the live-storage tracker, entered at
:meth:`~StepRecorder.step_begins` and left at :meth:`~StepRecorder.step_ends` (logging, evaluation and saving
between the steps are not tracked), with memfit's loop's phases: ``forward`` from the model's forward pre-hook
(which also counts the batch's tensors, made by the collator before the step), ``backward`` once the forward
returned, ``optimizer`` from ``on_pre_optimizer_step``. The pre-hook records the largest training batch seen
(rows x tokens, and whether an attention mask with masked positions, or packed position ids, reach the
attention); evaluation and generation forwards (no grad, or eval mode) are not training batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from memfit.estimate.category import Category
from memfit.runtime.tracker import LiveTensorTracker


@dataclass
class SeenBatch:
    """The largest training batch seen: ``batch`` rows of ``seq`` tokens, ``padding_mask`` as above."""

    batch: int = 0
    seq: int = 0
    padding_mask: bool = False

    def add(self, b: int, s: int, masked: bool) -> None:
        if b * s > self.batch * self.seq or (b * s == self.batch * self.seq and masked):
            self.batch, self.seq, self.padding_mask = b, s, masked


@dataclass
class StepRecorder:
    """The first ``steps`` optimizer steps of a Trainer on ``device`` (``"cuda"`` or ``"cpu"``)."""

    device: str
    steps: int = 2
    vocab: int | None = None
    tracker: LiveTensorTracker | None = None
    seen: SeenBatch = field(default_factory=SeenBatch)
    done_steps: int = 0
    done: bool = False
    _hooks: list[Any] = field(default_factory=list)
    _entered: bool = False

    def start(self, model: torch.nn.Module, optimizer: Any) -> None:
        """Reset the CUDA peak, or make the tracker (model and optimizer registered), and hook the model."""
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self.tracker = LiveTensorTracker(vocab=self.vocab)
            self.tracker.track_model(model)
            if optimizer is not None:
                self.tracker.track_optimizer(getattr(optimizer, "optimizer", optimizer))  # accelerate's wrapper
        self._hooks.append(model.register_forward_pre_hook(self._forward_begins, with_kwargs=True))
        self._hooks.append(model.register_forward_hook(self._forward_ends))

    @property
    def started(self) -> bool:
        return bool(self._hooks)

    def _training(self, module: torch.nn.Module) -> bool:
        return not self.done and module.training and torch.is_grad_enabled()

    def _forward_begins(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._training(module):
            return
        from torch.utils._python_dispatch import _disable_current_modes

        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            with _disable_current_modes():
                mask = kwargs.get("attention_mask")
                pos = kwargs.get("position_ids")
                masked = bool(isinstance(mask, torch.Tensor) and not bool(mask.all()))
                if isinstance(pos, torch.Tensor) and pos.dim() == 2 and mask is None:
                    masked = masked or bool((pos[:, 1:] == 0).any())
            self.seen.add(int(ids.shape[0]), int(ids.shape[1]), masked)
        if self.tracker is not None and self._entered:
            self.tracker.set_phase("forward")
            self.tracker.track_tensors(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))

    def _forward_ends(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self.tracker is not None and self._entered and self._training(module):
            self.tracker.set_phase("backward")

    def step_begins(self) -> None:
        if self.tracker is not None and not self.done and not self._entered:
            self.tracker.__enter__()
            self.tracker.set_phase("forward")
            self._entered = True

    def pre_optimizer(self) -> None:
        if self.tracker is not None and self._entered:
            self.tracker.set_phase("optimizer")

    def step_ends(self) -> bool:
        """After ``optimizer.step()`` and ``zero_grad``; True once the last measured step ended (then stopped)."""
        if self.done or not self.started:
            return False
        self._leave()
        self.done_steps += 1
        if self.done_steps < self.steps:
            return False
        self.stop()
        return True

    def _leave(self) -> None:
        if self.tracker is not None and self._entered:
            self.tracker.__exit__(None, None, None)
            self._entered = False

    def stop(self) -> None:
        self.done = True
        self._leave()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def result(self) -> dict[str, Any]:
        """``measured_peak_bytes``, ``measured_reserved_bytes`` (CUDA), ``by_category`` and the tracker's
        ``summary`` (CPU), ``steps``."""
        summary = self.tracker.summary() if self.tracker is not None else None
        if summary is not None:
            return {"measured_peak_bytes": int(summary["peak_bytes"]), "measured_reserved_bytes": None,
                    "by_category": {Category(k): int(v) for k, v in summary["by_category"].items()},
                    "tracker_summary": summary, "steps": self.done_steps}
        return {"measured_peak_bytes": int(torch.cuda.max_memory_allocated()),
                "measured_reserved_bytes": int(torch.cuda.max_memory_reserved()), "by_category": None,
                "tracker_summary": None, "steps": self.done_steps}
