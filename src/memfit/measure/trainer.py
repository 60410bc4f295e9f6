"""``memfit measure --trainer hf|trl``: one point measured through the real transformers ``Trainer`` or TRL
``SFTTrainer`` instead of memfit's own loop (:mod:`memfit.runtime.step`).

The model is memfit's (:func:`memfit.runtime.build.build_model`: random weights, the spec's LoRA and
checkpointing applied); the data a tiny in-memory dataset of ``batch x (tracked + warmup + timed steps)``
examples of exactly ``seq`` random tokens (labels a copy of the ids, no padding); the arguments say what the spec
says (``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``bf16``/``fp16`` for mixed precision,
``optim`` ``adamw_torch`` / ``sgd`` / ``adafactor``: the implementations memfit's loop runs; everything else the
framework's default, e.g. gradient clipping at 1.0). :class:`~memfit.runtime.trainer_step.StepRecorder` measures
the first two optimizer steps (CUDA: ``max_memory_allocated``; CPU: the live-storage tracker), as the Trainer
callback does; the steps after them are timed.

What differs from memfit's loop, by construction of the frameworks (transformers 5.24.0, TRL 1.16.0): the
Trainer's batch holds ``labels`` as a tensor of its own (memfit's loop passes the ids as the labels: ``b*s*8``
bytes more), it clips the gradients (a few scalars) and keeps its loss accumulator; TRL's SFTTrainer computes its
loss through its fused LM head (no (b, s, V) logits; its own transient, see
:func:`memfit.estimate.trainer.trl_head_bytes`), so its peak is not memfit's loop's.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.category import Category
from memfit.estimate.spec import RunSpec
from memfit.measure.result import PointResult

TRAINERS = ("hf", "trl")
OPTIM = {"adamw": "adamw_torch", "sgd": "sgd", "adafactor": "adafactor"}


def tiny_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over ``t0``..``t{vocab-1}`` (pad ``t0``, eos ``t1``), built in memory: TRL asks for a
    tokenizer, and nothing may be downloaded."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t2"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")


def trainer_dataset(*, examples: int, seq: int, vocab: int, seed: int = 0, labels: bool = True) -> Any:
    """``examples`` rows of exactly ``seq`` random token ids (never the pad or eos id) as a ``datasets.Dataset``."""
    import torch
    from datasets import Dataset

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, max(3, vocab), (examples, seq), generator=gen).tolist()
    data: dict[str, Any] = {"input_ids": ids}
    if labels:
        data["labels"] = [list(row) for row in ids]
    return Dataset.from_dict(data)


def _recording_callback(recorder: Any, device: str) -> Any:
    """A ``TrainerCallback`` driving ``recorder`` (:class:`memfit.runtime.trainer_step.StepRecorder`) through the
    Trainer's step events, and timing the steps after it (synchronised on CUDA)."""
    import torch
    from transformers import TrainerCallback

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    class Record(TrainerCallback):
        times: list[float] = []
        _t = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                           **kw: Any) -> None:
            recorder.start(model, optimizer)

        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            recorder.step_begins()
            sync()
            self._t = time.perf_counter()

        def on_pre_optimizer_step(self, *a: Any, **kw: Any) -> None:
            recorder.pre_optimizer()

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            sync()
            self.times.append(time.perf_counter() - self._t)
            recorder.step_ends()

    cb = Record()
    cb.times = []
    return cb


def measure_point_trainer(config: dict[str, Any], spec: RunSpec, *, trainer: str = "hf", device: str = "cpu",
                          steps: int = 3, warmup: int = 1, tracked_steps: int = 2, seed: int = 0) -> PointResult:
    """Measure ``spec`` through the Trainer (``"hf"``) or TRL's SFTTrainer (``"trl"``); see the module docstring.
    With ``"trl"`` the point carries the estimate of TRL's step (:func:`memfit.estimate.trainer.trainer_peak`
    with TRL's fused head), not memfit's loop's."""
    if trainer not in TRAINERS:
        raise MemfitError(f"--trainer must be one of {', '.join(TRAINERS)}; got {trainer!r}")
    if spec.optimizer not in OPTIM:
        raise MemfitError(f"--trainer {trainer} measures --optimizer {', '.join(OPTIM)}; got {spec.optimizer}")
    import torch

    from memfit.runtime.build import build_model
    from memfit.runtime.trainer_step import StepRecorder

    vocab = int(config.get("vocab_size") or 0)
    if vocab < 3:
        raise MemfitError("the config has no vocab_size: add it to config.json")
    torch.manual_seed(seed)
    model = build_model(config, spec, device=device)
    total = tracked_steps + warmup + steps
    common: dict[str, Any] = {
        "output_dir": tempfile.mkdtemp(prefix="memfit-trainer-"), "per_device_train_batch_size": spec.batch,
        "gradient_accumulation_steps": spec.grad_accum, "max_steps": total, "use_cpu": device != "cuda",
        "report_to": [], "save_strategy": "no", "logging_strategy": "no", "disable_tqdm": True,
        "optim": OPTIM[spec.optimizer], "seed": seed, "bf16": spec.precision == "mixed-bf16",
        "fp16": spec.precision == "mixed-fp16",
        "gradient_checkpointing": False,  # the builder applied spec.checkpointing already
        "dataloader_num_workers": 0,
    }
    recorder = StepRecorder(device=device, steps=tracked_steps, vocab=vocab)
    record = _recording_callback(recorder, device)
    examples = spec.batch * spec.grad_accum * total
    if trainer == "hf":
        from transformers import Trainer, TrainingArguments, default_data_collator

        ds = trainer_dataset(examples=examples, seq=spec.seq, vocab=vocab, seed=seed)
        run = Trainer(model=model, args=TrainingArguments(**common), train_dataset=ds,
                      data_collator=default_data_collator, callbacks=[record])
    else:
        from memfit.errors import require_extra

        require_extra("trl", "integrations")
        from trl import SFTConfig, SFTTrainer

        ds = trainer_dataset(examples=examples, seq=spec.seq, vocab=vocab, seed=seed, labels=False)
        run = SFTTrainer(model=model, args=SFTConfig(**common, max_length=spec.seq, packing=False), train_dataset=ds,
                         processing_class=tiny_tokenizer(vocab), callbacks=[record])
    result = run.train()
    if not recorder.done:
        raise MemfitError(f"the {trainer} Trainer ran fewer than {tracked_steps} steps to measure")
    measured = recorder.result()
    summary = measured["tracker_summary"] or {}
    by_category = dict(measured["by_category"] or {})
    peak = int(measured["measured_peak_bytes"])
    if device == "cuda":
        by_category[Category.UNTRACKED] = peak
    times = record.times[tracked_steps + warmup:]
    seconds = statistics.median(times) if times else float("nan")
    loss = getattr(result, "training_loss", None)
    return PointResult(
        batch=spec.batch, seq=spec.seq, checkpointing=spec.checkpointing, device=device, fits=True, peak_bytes=peak,
        reserved_bytes=measured["measured_reserved_bytes"], tracker_peak_bytes=summary.get("peak_bytes"),
        peak_phase=summary.get("peak_phase"), by_category=by_category,
        phase_peaks={k: int(v) for k, v in (summary.get("phase_peaks") or {}).items() if k != "setup"},
        step_seconds=seconds, step_times=tuple(times),
        tokens_per_second=(spec.batch * spec.seq / seconds) if seconds and seconds > 0 else None,
        loss=float(loss) if loss is not None else None,
        estimate_bytes=trl_estimate(config, spec, device) if trainer == "trl" else None,
    )


def trl_estimate(config: dict[str, Any], spec: RunSpec, device: str) -> int:
    """The estimate of TRL's step for ``spec``: ``loss="trl"``, TRL's fused head (memfit.estimate.trl_loss)."""
    from memfit.estimate import ModelShape, estimate_memory

    run = spec.with_(loss="trl", device="cuda" if device == "cuda" else "cpu")
    return estimate_memory(ModelShape.from_hf_config(config), run).peak_bytes
