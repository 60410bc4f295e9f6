"""The same import from live objects: a ``TrainingArguments`` / ``SFTConfig``, the model's ``PretrainedConfig``
and a ``LoraConfig``, read by attribute (duck-typed: nothing is imported from transformers or PEFT, and
nothing is instantiated). Their values are already resolved by the objects' own ``__post_init__`` (TRL's
``bf16``, the checkpointing alias), and the model config says the dtype the model was loaded in.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from memfit.configs.document import Document
from memfit.configs.importer import merge, read_document
from memfit.configs.reading import FileReading
from memfit.configs.result import ConfigRow, ImportedFile, ImportedRun, Setting

# the TrainingArguments / SFTConfig attributes memfit reads (configs/trainer.py, configs/trl.py)
ARGS_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "optim", "bf16", "fp16",
               "activation_checkpointing", "activation_checkpointing_kwargs", "gradient_checkpointing",
               "gradient_checkpointing_kwargs", "use_liger_kernel", "liger_kernel_config", "use_cpu", "fsdp",
               "fsdp_config", "deepspeed", "torch_compile", "auto_find_batch_size", "label_smoothing_factor",
               "use_cache", "optim_target_modules", "max_length", "packing", "padding_free", "activation_offloading")
LORA_FIELDS = ("peft_type", "r", "lora_alpha", "lora_dropout", "target_modules", "modules_to_save", "use_dora",
               "bias", "rank_pattern", "layers_to_transform", "exclude_modules", "trainable_token_indices",
               "target_parameters", "lora_bias", "layer_replication", "layers_pattern")


def _plain(value: Any) -> Any:
    """Enums to their values, sets to sorted lists, torch dtypes to names: what the file would hold."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(str(v) for v in value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _doc(label: str, data: dict[str, Any]) -> Document:
    return Document(path=Path(label), text="", format="json", data=data)


def dtype_name(value: Any) -> str | None:
    """``torch.bfloat16`` / ``"bfloat16"`` -> ``"bfloat16"``."""
    if value is None:
        return None
    return str(value).replace("torch.", "")


def imported_from_objects(args: Any = None, model_config: Any = None, peft_config: Any = None) -> ImportedRun:
    """An ImportedRun from live objects (module docstring); any of the three may be None."""
    readings: list[tuple[FileReading, ImportedFile]] = []
    if args is not None:
        name = type(args).__name__
        data = {f: _plain(getattr(args, f)) for f in ARGS_FIELDS if hasattr(args, f)}
        if data.get("fsdp") in (None, False, "", []):
            data.pop("fsdp_config", None)
            data.pop("fsdp", None)
        elif data.get("fsdp") is True:  # __post_init__ turns every fsdp value into True; fsdp_config says how
            data["fsdp"] = "true"
        if isinstance(data.get("deepspeed"), str) and not Path(data["deepspeed"]).is_file():
            data.pop("deepspeed")
        trl = hasattr(args, "max_length") and hasattr(args, "packing")
        doc = _doc(f"<{name}>", data)
        reading = read_document(doc, "trl-live" if trl else "hf-trainer-live")
        readings.append((reading, ImportedFile(path=f"<{name}>", kind="trl" if trl else "hf-trainer",
                                               version=reading.version)))
    if peft_config is not None:
        data = {f: _plain(getattr(peft_config, f)) for f in LORA_FIELDS if hasattr(peft_config, f)}
        if "peft_type" not in data:
            data["peft_type"] = "LORA"
        doc = _doc(f"<{type(peft_config).__name__}>", data)
        reading = read_document(doc, "peft")
        readings.append((reading, ImportedFile(path=str(doc.path), kind="peft", version=reading.version)))
    if model_config is not None:
        readings.append(_model_config(model_config))
    return merge(readings)


def _model_config(config: Any) -> tuple[FileReading, ImportedFile]:
    """The loaded model's dtype, attention kernel and quantization (``PretrainedConfig`` attributes)."""
    label = f"<{type(config).__name__}>"
    out = FileReading(kind="model-config", version="transformers PretrainedConfig", path=label)

    def put(field: str, value: Any, setting: str, memfit_value: Any, note: str = "") -> None:
        out.rows.append(ConfigRow(file=label, line=None, field=field, value=value, setting=setting, status="setting",
                                  memfit_value=memfit_value, note=note))
        out.settings.append(Setting(name=setting, value=memfit_value, row=len(out.rows) - 1, explicit=True))

    dtype = dtype_name(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None))
    if dtype:
        put("dtype", dtype, "weights_dtype", dtype, "the dtype the model was loaded in")
    attn = getattr(config, "_attn_implementation", None) or getattr(config, "attn_implementation", None)
    kernel = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash", "flash_attention_3": "flash"}.get(
        str(attn)) if attn else None
    if kernel:
        put("_attn_implementation", attn, "attention", kernel)
    quant = getattr(config, "quantization_config", None)
    if quant is not None:
        q = quant if isinstance(quant, dict) else {k: getattr(quant, k) for k in (
            "load_in_4bit", "load_in_8bit", "bnb_4bit_use_double_quant") if hasattr(quant, k)}
        if q.get("load_in_4bit"):
            put("quantization_config.load_in_4bit", True, "quantization", "nf4")
            put("quantization_config.bnb_4bit_use_double_quant", bool(q.get("bnb_4bit_use_double_quant")),
                "double_quant", bool(q.get("bnb_4bit_use_double_quant")))
        elif q.get("load_in_8bit"):
            put("quantization_config.load_in_8bit", True, "quantization", "int8")
    return out, ImportedFile(path=label, kind="model-config", version=out.version)
