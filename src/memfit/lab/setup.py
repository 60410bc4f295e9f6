"""What the lab runs on: the model (on CPU a scaled one, so the whole lab takes minutes on two cores), the run
each rep starts from, and the bundled data set for rep 3.

On CPU the lab keeps the lesson's worked example's architecture (``lesson-24x2048``: Llama, 32 heads of 64, 4 kv
heads, SwiGLU 2.75h) and scales it to hidden 256 (4 heads, 1 kv head, intermediate 704) with a 2,048-token
vocabulary, in fp32: a 32,000-token vocabulary would make the logits, not the blocks, the memory of so narrow a
model (the lesson's claims are about the blocks), and this CPU's bf16 matmuls run ~20x slower than fp32 (a bf16
step of this model at batch 4 x 256 took 10 s, fp32 well under one). fp32 elements are twice bf16's, so the
claimed constant scales from the lesson's ~20 B to ~40 B per layer x token x hidden. Depth is what rep 4 varies
(2 to 24); the other reps use 4 layers. The claims are scaled accordingly: a constant per layer x token x hidden
does not depend on the width; rep 7 and rep 6 keep the real 24 x 2048 model and trace it (the real transformers + PEFT
code on fake tensors, 0.00% from measured steps in the agreement matrix) instead of measuring it. On CUDA the
lab uses the given model at the lesson's sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit.estimate import lookup
from memfit.estimate.spec import RunSpec
from memfit.validate.agreement import scaled_config

LESSON_MODEL = "lesson-24x2048"
CPU_HIDDEN = 256
CPU_VOCAB = 2048
CPU_LAYERS = 4
DEPTHS = (2, 4, 8, 12, 16, 24)
WORKED = RunSpec(method="lora", precision="bf16", batch=4, seq=2048, device="cuda")  # the lesson's example


@dataclass(frozen=True, kw_only=True, slots=True)
class LabSetup:
    """The model each rep runs, its name as a command takes it, and the sizes of the reps."""

    model: str  # the catalogue name / path the user gave (or the lesson's model)
    config: dict[str, Any]  # the config the measured reps run (scaled on CPU)
    device: str
    spec: RunSpec  # the run reps 1, 2 and 8 start from
    batches: tuple[int, ...]
    seqs: tuple[int, ...]  # rep 5's sequence sweep
    depths: tuple[int, ...]
    depth_batch: int
    depth_seq: int
    timed_steps: int
    scaled: bool

    @property
    def model_arg(self) -> str:
        """How a command names the measured model: the user's, or for the scaled one the config file
        ``memfit lab --model-out lab-model.json`` writes."""
        return "lab-model.json" if self.scaled else self.model

    def with_layers(self, layers: int) -> dict[str, Any]:
        """The measured config at ``layers`` layers (rep 4); a per-layer list (``layer_types``) repeats."""
        from memfit.estimate.shape import ModelShape

        keys = ModelShape.from_hf_config(self.config).arch.keys
        cfg = dict(self.config)
        for k in keys.layers:
            if k in cfg:
                cfg[k] = layers
        for k in keys.layer_types:
            if isinstance(cfg.get(k), list) and cfg[k]:
                cfg[k] = [cfg[k][i % len(cfg[k])] for i in range(layers)]
        return cfg


def cpu_setup(model: str = LESSON_MODEL) -> LabSetup:
    """The scaled catalogue ``model`` (the lesson's by default) for a CPU (module docstring)."""
    from memfit.errors import MemfitError
    from memfit.estimate.catalogue import catalogue

    names = {e.name.lower(): e.name for e in catalogue()}
    if model.lower() not in names:
        raise MemfitError(f"on CPU the lab runs a scaled copy of a catalogue model, and {model!r} is not one: pass a "
                          f"name from `memfit models` (default {LESSON_MODEL}), or --device cuda to run the model as "
                          "given")
    model = names[model.lower()]
    cfg = scaled_config(model, CPU_HIDDEN, CPU_LAYERS)
    for key in lookup(model).shape.arch.keys.vocab:
        cfg[key] = CPU_VOCAB
    spec = RunSpec(method="lora", precision="fp32", attention="sdpa", batch=1, seq=256, device="cpu")
    return LabSetup(model=model, config=cfg, device="cpu", spec=spec, batches=(1, 2, 4),
                    seqs=(128, 256, 512, 1024), depths=DEPTHS, depth_batch=1, depth_seq=256, timed_steps=5,
                    scaled=True)


def cuda_setup(model: str, config: dict[str, Any]) -> LabSetup:
    """The given model on a GPU, at the lesson's sizes (seq 2048 for reps 1 and 2; rep 4 varies its depth)."""
    spec = RunSpec(method="lora", precision="bf16", attention="sdpa", batch=1, seq=2048, device="cuda")
    return LabSetup(model=model, config=config, device="cuda", spec=spec, batches=(1, 2, 4),
                    seqs=(512, 1024, 2048, 4096), depths=DEPTHS, depth_batch=1, depth_seq=2048, timed_steps=5,
                    scaled=False)


def bundled_data() -> tuple[Path, Path] | None:
    """GSM8K's training split and the Llama 2 tokenizer, from the ``shared/`` folder beside the repository
    (``../shared/data/gsm8k/train.jsonl``, ``../shared/tokenizers/llama2``, what the tests and ``memfit lengths``'
    README example use); None when this install has no such folder."""
    root = Path(__file__).resolve().parents[3].parent / "shared"
    data, tok = root / "data" / "gsm8k" / "train.jsonl", root / "tokenizers" / "llama2"
    return (data, tok) if data.is_file() and tok.is_dir() else None
