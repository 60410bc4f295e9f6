"""Each framework's documented config schema: the field names, the kinds of value each takes and the
framework's default, as ``tools/config_schemas.py`` read them from the framework's own source.

The tables live in ``schemas/<framework>.json`` beside this module, one per framework, each naming the
version and the source files it was read from (axolotl 0.21.0, LLaMA-Factory 0.9.5, TRL 1.16.0,
torchtune 0.6.1, DeepSpeed 0.19.8, accelerate 1.15.0, transformers 5.24.0, PEFT 0.21.2).

A value is checked the way the framework itself would take it: pydantic (axolotl, DeepSpeed) and
argparse (``HfArgumentParser``: TRL, LLaMA-Factory, the Trainer) both turn ``"4"`` into 4 and ``"2e-4"``
into 0.0002 (PyYAML reads ``2e-4`` as a string: YAML 1.1 floats need a dot), and ``"true"`` into True;
an int is a valid float; a single string is accepted where a list of strings is (the frameworks split it
or wrap it). ``"auto"`` is accepted for DeepSpeed's keys: the HF integration fills it in.

>>> f = FieldSpec(name="micro_batch_size", type="int | None", kinds=frozenset({"int", "null"}))
>>> f.coerce("4"), f.coerce(None)
(4, None)
>>> f.coerce("four") is INVALID
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Final


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


INVALID: Final = _Invalid()
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_TRUE = {"true", "yes", "on", "1", "t", "y"}
_FALSE = {"false", "no", "off", "0", "f", "n"}


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldSpec:
    """One documented field: its annotation as written in the framework's source, the kinds of value it
    takes, its choices (literals or enum values), its default and where it is declared."""

    name: str
    type: str
    kinds: frozenset[str]
    choices: tuple[Any, ...] = ()
    default: Any = None
    has_default: bool = False
    source: str = ""
    fields: Mapping[str, FieldSpec] | None = None  # a nested model (fsdp_config, zero_optimization)
    removed: Mapping[str, str] = field(default_factory=dict)  # nested keys the framework rejects
    plugin: str | None = None

    @property
    def computed_default(self) -> bool:
        """The default is an expression the framework evaluates (``{"expr": ...}`` in the table)."""
        return isinstance(self.default, dict) and set(self.default) == {"expr"}

    def coerce(self, value: Any) -> Any:
        """The value as the framework would take it, or :data:`INVALID`."""
        if value is None:
            return None if ("null" in self.kinds or "any" in self.kinds or not self.kinds and None in self.choices
                            or self.default is None and self.has_default) else INVALID
        if self.choices and _in_choices(value, self.choices):
            return value
        if "any" in self.kinds:
            return value
        for kind in ("bool", "int", "float", "str", "list", "dict"):
            if kind in self.kinds:
                out = _as_kind(value, kind)
                if out is not INVALID:
                    return out
        return INVALID

    def describe(self) -> str:
        """``int | None`` plus the choices, for messages."""
        if self.choices:
            shown = ", ".join(repr(c) for c in self.choices[:12])
            more = ", ..." if len(self.choices) > 12 else ""
            return f"{self.type} (one of {shown}{more})"
        return self.type


def _in_choices(value: Any, choices: tuple[Any, ...]) -> bool:
    if isinstance(value, bool):
        return any(c is value for c in choices)
    return value in choices or isinstance(value, str) and value.lower() in {str(c).lower() for c in choices}


def _as_kind(value: Any, kind: str) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        return INVALID
    if kind == "int":
        if isinstance(value, bool):
            return INVALID
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        return INVALID
    if kind == "float":
        if isinstance(value, bool):
            return INVALID
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return float(value)
        return INVALID
    if kind == "str":
        return value if isinstance(value, str) else INVALID
    if kind == "list":
        if isinstance(value, list | tuple):
            return list(value)
        return [value] if isinstance(value, str) else INVALID
    if kind == "dict":
        return value if isinstance(value, dict) else INVALID
    return INVALID


@dataclass(frozen=True, kw_only=True, slots=True)
class Schema:
    """One framework's fields (``schemas/<name>.json``)."""

    name: str
    version: str
    sources: tuple[str, ...]
    fields: Mapping[str, FieldSpec]
    removed: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    def __getitem__(self, name: str) -> FieldSpec:
        return self.fields[name]

    def default(self, name: str) -> Any:
        return self.fields[name].default


def _field(name: str, d: Mapping[str, Any]) -> FieldSpec:
    nested = d.get("fields")
    return FieldSpec(
        name=name,
        type=str(d.get("type", "")),
        kinds=frozenset(d.get("kinds", ())),
        choices=tuple(d.get("choices", ())),
        default=d.get("default"),
        has_default="default" in d,
        source=str(d.get("source", "")),
        fields={k: _field(k, v) for k, v in nested.items()} if isinstance(nested, dict) else None,
        removed=dict(d.get("removed", {})),
        plugin=d.get("plugin"),
    )


@cache
def load_schema(name: str) -> Schema:
    """The table for one framework: ``axolotl``, ``llamafactory``, ``trl``, ``transformers``, ``torchtune``,
    ``peft``, ``deepspeed`` or ``accelerate``."""
    text = resources.files("memfit.configs").joinpath("schemas", f"{name}.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    return Schema(
        name=doc["framework"],
        version=doc["version"],
        sources=tuple(doc["sources"]),
        fields={k: _field(k, v) for k, v in doc["fields"].items()},
        removed=dict(doc.get("removed", {})),
        extra={k: v for k, v in doc.items() if k not in ("framework", "version", "sources", "fields", "removed")},
    )
