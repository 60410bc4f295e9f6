"""The bookkeeping every framework reader shares: validate a file against the framework's schema, read
values with the framework's defaults, and record one row per field.

A framework module claims the fields that matter for memory (``set``, ``not_modelled``, ``reference``,
``model``); every other field the schema knows is reported as ``ignored`` (no memory effect) by
``finish``. A field the schema does not know, or a value of the wrong type, stops the import with the
file and line (``validate``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memfit.configs.document import Document, KeyPath
from memfit.configs.result import ConfigRow, ModelRef, Setting, Status
from memfit.configs.schema import INVALID, FieldSpec, Schema
from memfit.errors import MemfitError

_MISSING = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """Another file a config names (``deepspeed: ds.json``, ``fsdp_config: fsdp.json``) or an inline mapping of
    that kind (``deepspeed: {...}``)."""

    kind: str
    value: str | dict[str, Any]
    file: str
    line: int | None
    field: str
    prefix: KeyPath = ()  # where an inline mapping sits in the referencing document


@dataclass(kw_only=True, slots=True)
class FileReading:
    """One file's rows, settings, references and model."""

    kind: str
    version: str
    path: str
    rows: list[ConfigRow] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    model: ModelRef | None = None
    note: str = ""


class Reader:
    """Values, defaults and rows for one document of one framework (``prefix``: a mapping nested in it)."""

    def __init__(self, doc: Document, kind: str, schema: Schema, *, prefix: KeyPath = (),
                 data: Mapping[str, Any] | None = None, allow_auto: bool = False, label: str | None = None,
                 nested_keys: Mapping[str, Callable[[str], str]] | None = None):
        self.doc = doc
        self.kind = kind
        self.schema = schema
        self.prefix = prefix
        self.label = label or kind
        self.data: Mapping[str, Any] = doc.data if data is None else data
        self.allow_auto = allow_auto
        self.nested_keys = nested_keys or {}
        self.values: dict[str, Any] = {}
        self.claimed: set[str] = set()
        self.out = FileReading(kind=kind, version=schema.version, path=str(doc.path))
        self.validate()

    # ---- validation ---------------------------------------------------------------------------------

    def validate(self) -> None:
        """Unknown fields and wrong types, each named with its file and line."""
        for key, value in self.data.items():
            key = str(key)
            self.values[key] = self._check(self.schema.fields, self.schema.removed, key, value, (key,))

    def _check(self, fields: Mapping[str, FieldSpec], removed: Mapping[str, str], key: str, value: Any,
               path: tuple[str, ...]) -> Any:
        where = self.doc.where(self.prefix + path)
        dotted = ".".join(path)
        if key in removed:
            raise MemfitError(f"{where}: {dotted}: {self.schema.version} rejects this key: {removed[key]}")
        spec = fields.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, list(fields), n=3, cutoff=0.75)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise MemfitError(f"{where}: unknown {self.label} field {dotted!r}: {hint}{self.schema.version} has no "
                              f"such option (memfit checks field names against {self.schema.sources[0]}); "
                              "fix the name or remove it")
        if self.allow_auto and value == "auto":
            return value
        out = spec.coerce(value)
        if out is INVALID:
            raise MemfitError(f"{where}: {dotted} must be {spec.describe()} ({self.schema.version}, {spec.source}); "
                              f"got {value!r}")
        if spec.fields is not None and isinstance(out, dict):
            norm = self.nested_keys.get(key, str)
            return {norm(str(k)): self._check(spec.fields, spec.removed, norm(str(k)), v, (*path, str(k)))
                    for k, v in out.items()}
        return out

    # ---- values ---------------------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        head, _, rest = name.partition(".")
        if head not in self.values:
            return False
        return not rest or isinstance(self.values[head], dict) and rest in self.values[head]

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """The file's value, else ``default``, else the framework's documented default (None when the framework
        computes it)."""
        head, _, rest = name.partition(".")
        if self.has(name):
            return self.values[head][rest] if rest else self.values[head]
        if default is not _MISSING:
            return default
        spec = self._spec(name)
        if spec is None or not spec.has_default or spec.computed_default:
            return None
        return spec.default

    def _spec(self, name: str) -> FieldSpec | None:
        head, _, rest = name.partition(".")
        spec = self.schema.fields.get(head)
        if spec is not None and rest:
            return spec.fields.get(rest) if spec.fields else None
        return spec

    def line(self, name: str) -> int | None:
        return self.doc.line(self.prefix + tuple(name.split(".")))

    # ---- rows -------------------------------------------------------------------------------------------

    def row(self, name: str, status: Status, *, setting: str | None = None, memfit_value: Any = None,
             note: str = "", default: bool = False, value: Any = _MISSING) -> int:
        shown = ".".join((*self.prefix, name)) if self.prefix else name
        self.out.rows.append(ConfigRow(
            file=str(self.doc.path), line=None if default else self.line(name), field=shown,
            value=self.get(name) if value is _MISSING else value, setting=setting, status=status,
            memfit_value=memfit_value, note=note, default=default))
        return len(self.out.rows) - 1

    def set(self, setting: str, value: Any, *fields: str, note: str = "", memfit_value: Any = _MISSING) -> None:
        """Record ``setting = value`` read from ``fields`` (the first is shown when all are defaults)."""
        shown = value if memfit_value is _MISSING else memfit_value
        present = [f for f in fields if self.has(f)]
        self.claimed.update(f.split(".")[0] for f in fields if self.has(f.split(".")[0]))
        if present:
            first = None
            for f in present:
                i = self.row(f, "setting", setting=setting, memfit_value=shown, note=note)
                first = i if first is None else first
            assert first is not None
            self.out.settings.append(Setting(name=setting, value=value, row=first, explicit=True))
        else:
            spec = self._spec(fields[0])
            src = f" ({spec.source})" if spec is not None and spec.source else ""
            default_note = f"{self.schema.version} default{src}" + (f"; {note}" if note else "")
            i = self.row(fields[0], "setting", setting=setting, memfit_value=shown, note=default_note, default=True)
            self.out.settings.append(Setting(name=setting, value=value, row=i, explicit=False))

    def also(self, setting: str, value: Any) -> None:
        """A second setting read from the row just written (``gradient_checkpointing: offload`` is checkpointing
        full and offload)."""
        self.out.settings.append(Setting(name=setting, value=value, row=len(self.out.rows) - 1, explicit=True))

    def assume(self, setting: str, value: Any, label: str, note: str) -> None:
        """A setting no field states, that the framework implies (``(model dtype)``: what from_pretrained loads)."""
        self.out.rows.append(ConfigRow(file=str(self.doc.path), line=None, field=label, value=None, setting=setting,
                                       status="setting", memfit_value=value, note=note, default=True))
        self.out.settings.append(Setting(name=setting, value=value, row=len(self.out.rows) - 1, explicit=False))

    def not_modelled(self, name: str, note: str, *, active: Callable[[Any], bool] | None = None) -> None:
        """A field memfit cannot model yet: NOT MODELLED when it is on, ignored when it is off."""
        if not self.has(name):
            return
        self.claimed.add(name.split(".")[0])
        value = self.get(name)
        on = active(value) if active else _is_on(value, self._spec(name))
        self.row(name, "NOT MODELLED" if on else "ignored", note=note if on else "off")

    def ignore(self, name: str, note: str = "no memory effect") -> None:
        if self.has(name):
            self.claimed.add(name.split(".")[0])
            self.row(name, "ignored", note=note)

    def reference(self, name: str, kind: str) -> None:
        """``deepspeed: ds.json`` (or an inline mapping): the importer reads it as a ``kind`` config."""
        if not self.has(name) or self.get(name) in (None, "", False):
            if self.has(name):
                self.ignore(name, "not set")
            return
        self.claimed.add(name)
        value = self.get(name)
        if not isinstance(value, str | dict):
            return
        self.out.references.append(Reference(kind=kind, value=value, file=str(self.doc.path), line=self.line(name),
                                             field=".".join((*self.prefix, name)), prefix=self.prefix + (name,)))
        self.row(name, "setting", setting="reference", memfit_value=value if isinstance(value, str) else "inline",
                  note=f"read as a {kind} config", value=value if isinstance(value, str) else "{...}")

    def model(self, name: str, value: Any = _MISSING) -> None:
        if not self.has(name):
            return
        self.claimed.add(name)
        v = self.get(name) if value is _MISSING else value
        if not isinstance(v, str) or not v:
            return
        self.out.model = ModelRef(value=v, file=str(self.doc.path), line=self.line(name), field=name)
        self.row(name, "setting", setting="model", memfit_value=v)

    def claim(self, *names: str) -> None:
        self.claimed.update(n for n in names if self.has(n))

    def finish(self, ignored_note: str = "no memory effect") -> FileReading:
        """Every other field of the file: ignored. Rows in file order, defaults after."""
        for key in self.values:
            if key not in self.claimed:
                self.row(key, "ignored", note=ignored_note)
        rows = self.out.rows
        order = sorted(range(len(rows)), key=lambda i: (rows[i].default, rows[i].line or 1 << 30, i))
        new_index = {old: new for new, old in enumerate(order)}
        self.out.rows = [rows[i] for i in order]
        self.out.settings = [Setting(name=s.name, value=s.value, row=new_index[s.row], explicit=s.explicit)
                             for s in self.out.settings]
        return self.out

    def extend(self, other: FileReading) -> None:
        """Merge a nested reading (an inline DeepSpeed mapping) into this one."""
        base = len(self.out.rows)
        self.out.rows.extend(other.rows)
        self.out.settings.extend(Setting(name=s.name, value=s.value, row=s.row + base, explicit=s.explicit)
                                 for s in other.settings)
        self.out.references.extend(other.references)


def _is_on(value: Any, spec: FieldSpec | None) -> bool:
    if value in (None, False, 0, "", [], {}, "none", "no", "NO"):
        return False
    return not (spec is not None and spec.has_default and value == spec.default and not spec.computed_default
                and spec.default not in (True,))


def names(values: Iterable[Any]) -> tuple[str, ...]:
    """A list (or one comma-separated string) of module names as a tuple."""
    out: list[str] = []
    for v in values:
        out += [p.strip() for p in str(v).split(",") if p.strip()]
    return tuple(out)


def dora(r: Reader, field: str) -> None:
    """``use_dora`` (axolotl ``peft_use_dora``): the ``use_dora`` setting when true, ignored when false."""
    if r.get(field, False):
        r.set("use_dora", True, field, note="DoRA (PEFT use_dora): fp32 magnitudes, saved outputs and the weight "
                                            "norm (estimate/activations/ops.py)")
    else:
        r.ignore(field, "off")
