"""What reading a user's training configs gives: the model they name, memfit's settings, and one row per
field read (``field -> value -> memfit setting | ignored | NOT MODELLED``).

memfit's setting names (``ImportedRun.settings``) are the :class:`~memfit.estimate.spec.RunSpec` field
names where RunSpec has the knob, and these where it does not (yet):

==================  =========================================================================================
``adapter``         ``"lora"`` or ``"none"`` (full fine-tuning); with ``quantization`` it gives ``method``
``quantization``    ``"nf4"`` (4-bit bitsandbytes / torchao NF4), ``"int8"`` (LLM.int8), ``"none"``
``weights_dtype``   the dtype the model is loaded in: ``float32``, ``bfloat16``, ``float16``, ``auto`` (the
                    checkpoint's own, from its config.json)
``autocast``        ``bf16`` / ``fp16`` mixed precision (the Trainer's ``bf16=True``), or ``none``
``trainable_fp32``  trainable weights are kept in fp32 (DeepSpeed's master copy, LLaMA-Factory's upcast)
``sharding``        ``none``, ``zero1``, ``zero2``, ``zero3`` (DeepSpeed stages; FSDP FULL_SHARD = zero3,
                    SHARD_GRAD_OP = zero2)
``gpus``            data-parallel processes (world size)
``packing``         examples packed into full rows
``eval_batch``      the evaluation micro-batch
``optimizer_impl``  the framework's optimizer name (``adamw_torch_fused``, ``paged_adamw_8bit``, ...)
``offload_optimizer`` / ``offload_params``  ZeRO / FSDP CPU offload of optimizer states / parameters
==================  =========================================================================================

``precision`` and ``method`` are derived from the first five when a RunSpec is built (:mod:`.convert`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["setting", "ignored", "NOT MODELLED"]
STATUSES: tuple[Status, ...] = ("setting", "ignored", "NOT MODELLED")

# settings that feed a RunSpec field by derivation rather than by name
DERIVED_INPUTS: Mapping[str, str] = {
    "adapter": "method",
    "quantization": "method",
    "weights_dtype": "precision",
    "autocast": "precision",
    "trainable_fp32": "precision",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigRow:
    """One field read from one file (or a framework default the file left unsaid)."""

    file: str
    line: int | None
    field: str
    value: Any
    setting: str | None
    status: Status
    memfit_value: Any = None
    note: str = ""
    default: bool = False  # the file does not say it: the framework's default applies

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "field": self.field, "value": _jsonable(self.value),
                "setting": self.setting, "memfit_value": _jsonable(self.memfit_value), "status": self.status,
                "note": self.note, "default": self.default}


@dataclass(frozen=True, kw_only=True, slots=True)
class Setting:
    """A memfit setting's value and the row it came from."""

    name: str
    value: Any
    row: int  # index into the reading's rows
    explicit: bool  # written in a file (True) or a framework default (False)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRef:
    """The base model a config names: a Hub id, a local path or a catalogue name, and where it was read."""

    value: str
    file: str
    line: int | None
    field: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "file": self.file, "line": self.line, "field": self.field}


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportedFile:
    path: str
    kind: str
    version: str
    referenced_by: str | None = None  # "run.yaml:14 deepspeed" for a file followed from another
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "version": self.version, "referenced_by": self.referenced_by,
                "note": self.note}


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportedRun:
    """Every file read, merged: later files win, and a value written in a file wins over a default.

    ``settings`` maps memfit setting names (module docstring) to values; ``rows`` is the import table in
    reading order; ``origin`` maps each setting to the row its value came from.
    """

    files: tuple[ImportedFile, ...]
    model: ModelRef | None
    settings: Mapping[str, Any]
    rows: tuple[ConfigRow, ...]
    origin: Mapping[str, int] = field(default_factory=dict)

    def row_of(self, setting: str) -> ConfigRow | None:
        i = self.origin.get(setting)
        return self.rows[i] if i is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"files": [f.to_dict() for f in self.files],
                "model": self.model.to_dict() if self.model else None,
                "settings": {k: _jsonable(v) for k, v in self.settings.items()},
                "rows": [r.to_dict() for r in self.rows]}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
