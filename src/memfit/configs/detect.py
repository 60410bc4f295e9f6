"""Which framework a config file is for, from its keys.

The structural kinds are told by a key only they have: accelerate (``distributed_type``), torchtune
(``_component_`` mappings), PEFT (``peft_type``, or ``r`` + ``lora_alpha`` + ``target_modules``), DeepSpeed
(``zero_optimization``, ``train_micro_batch_size_per_gpu``, or ``bf16``/``fp16``/``optimizer`` blocks). The
Trainer-based kinds share most keys; the one whose schema leaves the fewest keys unknown wins, and among
equals the most specific (TrainingArguments < TRL < LLaMA-Factory < axolotl). ``KIND:PATH`` (``--config
trl:run.yaml``) says it outright.
"""

from __future__ import annotations

from pathlib import Path

from memfit.configs.document import Document
from memfit.configs.schema import load_schema
from memfit.errors import MemfitError

KINDS: dict[str, str] = {
    "axolotl": "axolotl YAML",
    "llamafactory": "LLaMA-Factory YAML",
    "trl": "TRL SFTConfig YAML/JSON",
    "hf-trainer": "Hugging Face TrainingArguments YAML/JSON",
    "torchtune": "torchtune recipe YAML",
    "peft": "PEFT adapter_config.json",
    "deepspeed": "DeepSpeed JSON",
    "accelerate": "accelerate config YAML",
    "fsdp": "a Trainer's fsdp_config JSON",
}
# Trainer-based kinds, most specific (smallest schema) first
TRAINER_ORDER: tuple[tuple[str, str], ...] = (("hf-trainer", "transformers"), ("trl", "trl"),
                                              ("llamafactory", "llamafactory"), ("axolotl", "axolotl"))
DEEPSPEED_KEYS = frozenset({"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                            "zero_allow_untested_optimizer", "steps_per_print", "wall_clock_breakdown"})


def reads() -> str:
    """The kinds memfit reads, for messages."""
    return ", ".join(v for k, v in KINDS.items() if k != "fsdp")


def split_kind(spec: str | Path) -> tuple[str | None, Path]:
    """``"trl:run.yaml"`` -> ``("trl", Path("run.yaml"))``; a plain path -> ``(None, path)``."""
    text = str(spec)
    head, sep, rest = text.partition(":")
    if sep and head in KINDS and rest:
        return head, Path(rest)
    return None, Path(text)


def detect_kind(doc: Document) -> tuple[str, str]:
    """(kind, note): the framework ``doc`` is for; the note says when the choice was a close call."""
    data = doc.data
    keys = {str(k) for k in data}
    if "distributed_type" in keys or "compute_environment" in keys:
        return "accelerate", ""
    if any(isinstance(v, dict) and "_component_" in v for v in data.values()):
        return "torchtune", ""
    if "peft_type" in keys or doc.path.name == "adapter_config.json" or {"r", "lora_alpha", "target_modules"} <= keys:
        return "peft", ""
    if keys & DEEPSPEED_KEYS or any(isinstance(data.get(k), dict) for k in ("bf16", "fp16", "optimizer")):
        return "deepspeed", ""
    fsdp_keys = set(load_schema("transformers").extra["fsdp_config_keys"])
    bare = {k[5:] if k.startswith("fsdp_") else k for k in keys}
    if keys and bare <= fsdp_keys and bare - {"activation_checkpointing"}:
        return "fsdp", ""
    scored = []
    for rank, (kind, schema_name) in enumerate(TRAINER_ORDER):
        schema = load_schema(schema_name)
        known = len(keys & set(schema.fields)) + (1 if kind == "trl" and "env" in keys else 0)
        scored.append((len(keys) - known, rank, kind, known))
    scored.sort()
    unknown, _, kind, known = scored[0]
    if known == 0:
        raise MemfitError(f"{doc.path} is not a training config memfit reads (none of its keys "
                          f"{', '.join(sorted(keys)[:5])}{', ...' if len(keys) > 5 else ''} belongs to one). memfit "
                          f"reads: {reads()}. If it is one of these, say which: --config KIND:{doc.path} with KIND "
                          f"one of {', '.join(k for k in KINDS if k != 'fsdp')}")
    note = ""
    if kind == "hf-trainer" and scored[1][2] == "trl" and scored[1][0] == unknown:
        note = ("read as TrainingArguments (transformers defaults: checkpointing and bf16 off); for TRL's "
                f"SFTTrainer pass --config trl:{doc.path} (TRL turns both on)")
    return kind, note
