"""One training step exactly as the transformers Trainer runs it, and its timing.

Trainer's ``training_step``, reduced to what memory depends on::

    with autocast(device, dtype):                        # only for mixed-* precision
        loss = model(input_ids=ids, labels=ids).loss     # the output object (logits) is dropped here
    loss.backward()                                      # scaler.scale(loss).backward() for mixed-fp16
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

The peak of a run is taken over all steps, the first included: torch optimizers allocate their state
lazily in the first ``step()``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec
from memfit.runtime.act_offload import offloading_activations
from memfit.runtime.build import autocast_dtype, trainable_parameters
from memfit.runtime.tracker import LiveTensorTracker

LEARNING_RATE = 1e-4  # any value: memory and time do not depend on it


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """One step: wall seconds (synchronised on CUDA), the loss when it is a real number, tokens b*s."""

    seconds: float
    loss: float | None
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "loss": self.loss, "tokens": self.tokens}


@dataclass(frozen=True, kw_only=True, slots=True)
class StepInputs:
    """A batch the caller made (and holds): token ids ``(b, s)`` int64, the labels (a separate tensor, as a
    data collator makes them) and an optional attention mask. Without it :func:`run_step` makes random ids
    inside the forward phase and passes them as the labels too."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor | None = None


def make_optimizer(model: torch.nn.Module, spec: RunSpec, *, paged: bool = True) -> Any:
    """The optimizer ``spec.optimizer`` names, over the trainable parameters, as the Trainer builds it.

    ``adamw``: ``torch.optim.AdamW`` with ``spec.adamw_impl``'s path: ``fused=True`` (the Trainer's default
    ``adamw_torch_fused``), ``foreach=True``, or both False (the for-loop), moments in the parameter's dtype;
    ``sgd``: ``torch.optim.SGD`` (no state); ``sgd-momentum``: SGD with momentum 0.9 (one buffer);
    ``adafactor``: transformers' ``Adafactor(scale_parameter=False, relative_step=False)`` (factored
    second moment); ``adamw-8bit``: bitsandbytes ``AdamW8bit`` (what the Trainer's ``adamw_bnb_8bit`` builds; it
    runs on the CPU too in bitsandbytes 0.50); ``paged-adamw-8bit`` / ``paged-adamw-32bit``: ``PagedAdamW8bit`` /
    ``PagedAdamW32bit`` (CUDA only; ``paged=False`` builds their non-paged twins ``AdamW8bit`` / ``AdamW32bit``,
    the same states allocated as tensors, which is what the trace runs on fake tensors).
    """
    params = trainable_parameters(model)
    if not params:
        raise MemfitError("the model has no trainable parameters: check --method and --targets")
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0, fused=spec.adamw_impl == "fused",
                                 foreach=spec.adamw_impl == "foreach")
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE)
    if spec.optimizer == "sgd-momentum":
        return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=0.9)
    if spec.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=LEARNING_RATE, scale_parameter=False, relative_step=False,
                         warmup_init=False)
    if spec.optimizer in ("adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit"):
        if importlib.util.find_spec("bitsandbytes") is None:
            raise MemfitError(f"--optimizer {spec.optimizer} needs bitsandbytes: pip install 'memfit[torch]'")
        import bitsandbytes as bnb  # type: ignore[import-not-found]

        if spec.optimizer == "adamw-8bit":
            return bnb.optim.AdamW8bit(params, lr=LEARNING_RATE, weight_decay=0.0)
        if not paged:
            cls = bnb.optim.AdamW8bit if spec.optimizer == "paged-adamw-8bit" else bnb.optim.AdamW32bit
            return cls(params, lr=LEARNING_RATE, weight_decay=0.0)
        if params[0].device.type != "cuda":
            raise MemfitError(f"--optimizer {spec.optimizer} runs on CUDA only (unified memory); on the CPU use "
                              "--optimizer adamw-8bit or adamw")
        cls = bnb.optim.PagedAdamW8bit if spec.optimizer == "paged-adamw-8bit" else bnb.optim.PagedAdamW32bit
        return cls(params, lr=LEARNING_RATE, weight_decay=0.0)
    raise MemfitError(f"unknown --optimizer {spec.optimizer!r}")


def make_scaler(spec: RunSpec, device: str) -> Any:
    """A GradScaler for ``mixed-fp16`` (as the Trainer uses one), else None."""
    if spec.precision != "mixed-fp16":
        return None
    return torch.amp.GradScaler(_device_type(device))


def random_batch(*, batch: int, seq: int, vocab: int, device: str, seed: int = 0) -> torch.Tensor:
    """Random token ids ``(batch, seq)`` int64, the same for a given seed."""
    if _device_type(device) in ("cpu", "cuda"):
        gen = torch.Generator(device=_device_type(device)).manual_seed(seed)
        return torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    return torch.randint(0, vocab, (batch, seq), device=device)


def run_step(model: torch.nn.Module, spec: RunSpec, *, optimizer: Any = None, batch: int, seq: int,
             vocab: int, device: str, tracker: LiveTensorTracker | None = None, scaler: Any = None,
             inputs: StepInputs | None = None) -> StepResult:
    """One Trainer-like training step; with ``tracker``, each part runs in its tracker phase.

    The tracker mode is entered here unless the caller already entered it. ``optimizer=None`` builds
    one with :func:`make_optimizer` (its state then dies with the step, so pass one for repeated steps).
    ``inputs`` replaces the random batch; ``batch`` and ``seq`` then only count the tokens.
    """
    if optimizer is None:
        optimizer = make_optimizer(model, spec)
    dev_type = _device_type(device)
    amp = autocast_dtype(spec)
    phase = tracker.phase if tracker is not None else _no_phase
    outer = tracker if (tracker is not None and not _mode_active(tracker)) else contextlib.nullcontext()
    sync = torch.cuda.synchronize if dev_type == "cuda" else _no_sync
    sync()
    start = time.perf_counter()
    with outer:
        for _ in range(max(1, spec.grad_accum)):
            # gradient accumulation: from the second micro-batch on, the gradients of the earlier ones stay
            # allocated (autograd adds into them in place) through this one's forward and backward
            offloading = (offloading_activations(model, device_type=dev_type) if spec.offload_activations
                          else contextlib.nullcontext())
            with offloading:  # TRL's SFTTrainer.training_step runs the micro-batch under OffloadActivations
                loss = _micro_batch(model, spec, phase=phase, inputs=inputs, batch=batch, seq=seq, vocab=vocab,
                                    device=device, dev_type=dev_type, amp=amp, scaler=scaler)
        with phase("optimizer"):
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    sync()
    seconds = time.perf_counter() - start
    return StepResult(seconds=seconds, loss=_loss_value(loss), tokens=batch * seq * max(1, spec.grad_accum))


def _micro_batch(model: torch.nn.Module, spec: RunSpec, *, phase: Any, inputs: StepInputs | None, batch: int,
                 seq: int, vocab: int, device: str, dev_type: str, amp: Any, scaler: Any) -> torch.Tensor:
    """One micro-batch's forward and backward (the Trainer's ``training_step``); returns the detached loss."""
    with phase("forward"):
        if inputs is not None:
            ids, labels, attention_mask = inputs.input_ids, inputs.labels, inputs.attention_mask
        else:
            ids = labels = random_batch(batch=batch, seq=seq, vocab=vocab, device=device)
            attention_mask = None
            if spec.padding_mask:
                attention_mask = torch.ones_like(ids)
                attention_mask[0, -max(1, seq // 8):] = 0  # right padding on the first row
        amp_ctx = torch.autocast(device_type=dev_type, dtype=amp) if amp is not None else contextlib.nullcontext()
        with amp_ctx:
            loss = model(input_ids=ids, attention_mask=attention_mask, labels=labels).loss
        del ids, labels, attention_mask
    with phase("backward"):
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()


def time_steps(model: torch.nn.Module, spec: RunSpec, *, optimizer: Any, batch: int, seq: int, vocab: int,
               device: str, steps: int, warmup: int = 1, scaler: Any = None) -> list[float]:
    """Seconds per step of ``steps`` steps after ``warmup`` untimed ones, all without a tracker."""
    times = []
    for i in range(warmup + steps):
        r = run_step(model, spec, optimizer=optimizer, batch=batch, seq=seq, vocab=vocab, device=device,
                     scaler=scaler)
        if i >= warmup:
            times.append(r.seconds)
    return times


def median_seconds(times: list[float]) -> float:
    """The median of the timed steps (robust to one slow step)."""
    return float(statistics.median(times)) if times else float("nan")


@contextlib.contextmanager
def _no_phase(name: str) -> Any:
    yield


def _no_sync() -> None:
    return None


def _mode_active(mode: Any) -> bool:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(m is mode for m in _get_current_dispatch_mode_stack())


def _device_type(device: str) -> str:
    return torch.device(device).type


def _loss_value(loss: torch.Tensor) -> float | None:
    if loss.device.type == "meta" or type(loss).__name__ == "FakeTensor":
        return None
    try:
        return float(loss)
    except (RuntimeError, NotImplementedError):
        return None
