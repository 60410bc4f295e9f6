"""Reading several config files into one :class:`~memfit.configs.result.ImportedRun`.

Each file is detected (or named ``KIND:PATH``), read by its framework's module, and the files it names
(``deepspeed: ds.json``, ``fsdp_config: fsdp.json``, accelerate's ``deepspeed_config_file``) are read right
after it. A referenced path is taken relative to the file that names it, then to the working directory
(where the framework resolves it when it launches); the row says when it lies outside the folder of the
file that names it. A missing referenced file stops the import with the file and line that named it.

Merging: files are applied in order, later files win; within that, a value written in a file wins over a
framework's default (an axolotl file's unwritten ``micro_batch_size: 1`` does not undo a DeepSpeed file's
``train_micro_batch_size_per_gpu``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from memfit.configs.detect import detect_kind, split_kind
from memfit.configs.document import Document, load_document
from memfit.configs.reading import FileReading, Reference
from memfit.configs.result import ConfigRow, ImportedFile, ImportedRun, ModelRef
from memfit.errors import MemfitError

MAX_DEPTH = 3


def read_document(doc: Document, kind: str, *, parent_kind: str | None = None,
                  parent: Mapping[str, Any] | None = None) -> FileReading:
    """One document read by its framework's module."""
    import memfit.configs.accelerate as accelerate
    import memfit.configs.axolotl as axolotl
    import memfit.configs.deepspeed as deepspeed
    import memfit.configs.llamafactory as llamafactory
    import memfit.configs.peft as peft
    import memfit.configs.torchtune as torchtune
    import memfit.configs.trl as trl

    readers: dict[str, Callable[[Document], FileReading]] = {
        "axolotl": axolotl.read_axolotl,
        "llamafactory": llamafactory.read_llamafactory,
        "trl": trl.read_trl,
        "hf-trainer": lambda d: trl.read_trl(d, kind="hf-trainer"),
        "trl-live": lambda d: trl.read_trl(d, kind="trl", live=True),
        "hf-trainer-live": lambda d: trl.read_trl(d, kind="hf-trainer", live=True),
        "torchtune": torchtune.read_torchtune,
        "peft": peft.read_peft,
        "accelerate": accelerate.read_accelerate,
        "fsdp": accelerate.read_fsdp,
        "deepspeed": lambda d: deepspeed.read_deepspeed(d, parent_kind=parent_kind, parent=parent),
    }
    return readers[kind](doc)


def import_configs(paths: Sequence[str | Path]) -> ImportedRun:
    """Read every file (``KIND:PATH`` forces the kind) and the files they name; merge them (module docstring)."""
    if not paths:
        raise MemfitError("no config file given")
    readings: list[tuple[FileReading, ImportedFile]] = []
    seen: set[Path] = set()
    for spec in paths:
        forced, path = split_kind(spec)
        doc = load_document(path)
        kind, note = (forced, "") if forced else detect_kind(doc)
        reading = read_document(doc, kind)
        reading.note = note
        readings.append((reading, ImportedFile(path=str(doc.path), kind=kind, version=reading.version, note=note)))
        seen.add(doc.path.resolve())
        _follow(doc, reading, readings, seen, depth=1)
    return merge(readings)


def _follow(doc: Document, reading: FileReading, out: list[tuple[FileReading, ImportedFile]], seen: set[Path],
            depth: int) -> None:
    parent = {s.name: s.value for s in reading.settings}
    for ref in reading.references:
        if isinstance(ref.value, dict):
            sub = read_inline(doc, ref, parent_kind=reading.kind, parent=parent)
            out.append((sub, ImportedFile(path=str(doc.path), kind=ref.kind, version=sub.version,
                                          referenced_by=f"{ref.file}:{ref.line or '?'} {ref.field} (inline)")))
            continue
        path, outside = resolve_reference(ref)
        _mark_reference(reading, ref, path, outside)
        if path.resolve() in seen:
            continue
        if depth >= MAX_DEPTH:
            raise MemfitError(f"{ref.file}:{ref.line or '?'}: {ref.field} names {path}, more than {MAX_DEPTH} files "
                              "deep: pass it with its own --config")
        seen.add(path.resolve())
        sub_doc = load_document(path)
        sub = read_document(sub_doc, ref.kind, parent_kind=reading.kind, parent=parent)
        out.append((sub, ImportedFile(path=str(path), kind=ref.kind, version=sub.version,
                                      referenced_by=f"{ref.file}:{ref.line or '?'} {ref.field}")))
        _follow(sub_doc, sub, out, seen, depth + 1)


def read_inline(doc: Document, ref: Reference, *, parent_kind: str, parent: Mapping[str, Any]) -> FileReading:
    """``deepspeed: {...}`` written inside a Trainer config: read with its lines in the same file."""
    import memfit.configs.deepspeed as deepspeed

    assert isinstance(ref.value, dict)
    if ref.kind != "deepspeed":
        raise MemfitError(f"{ref.file}:{ref.line or '?'}: {ref.field}: an inline {ref.kind} mapping is not read; "
                          "put it in a file")
    return deepspeed.read_deepspeed(doc, prefix=ref.prefix, data=ref.value, parent_kind=parent_kind, parent=parent)


def resolve_reference(ref: Reference) -> tuple[Path, bool]:
    """(path, outside): ``ref.value`` relative to the naming file's folder, then to the working directory."""
    assert isinstance(ref.value, str)
    base = Path(ref.file).parent
    p = Path(ref.value).expanduser()
    tried = [p] if p.is_absolute() else [base / p, Path.cwd() / p]
    for candidate in tried:
        if candidate.is_file():
            try:
                candidate.resolve().relative_to(base.resolve())
                outside = False
            except ValueError:
                outside = True
            return candidate, outside
    looked = " and ".join(str(t) for t in dict.fromkeys(tried))
    raise MemfitError(f"{ref.file}:{ref.line or '?'}: {ref.field}: {ref.value} not found (looked in {looked}): put "
                      f"the {ref.kind} config there, or fix the path")


def _mark_reference(reading: FileReading, ref: Reference, path: Path, outside: bool) -> None:
    for i, row in enumerate(reading.rows):
        if row.setting == "reference" and row.field == ref.field:
            note = f"read {path}" + (f", outside {Path(ref.file).parent.resolve()}: memfit follows it because "
                                     f"{Path(ref.file).name} names it" if outside else "")
            reading.rows[i] = replace(row, memfit_value=str(path), note=note)


def merge(readings: Sequence[tuple[FileReading, ImportedFile]]) -> ImportedRun:
    """Later readings win; a written value wins over a default (module docstring)."""
    rows: list[ConfigRow] = []
    winner: dict[str, tuple[bool, int, Any]] = {}  # setting -> (explicit, global row, value)
    model: ModelRef | None = None
    for reading, _ in readings:
        base = len(rows)
        rows.extend(reading.rows)
        for s in reading.settings:
            current = winner.get(s.name)
            if current is None or s.explicit or not current[0]:
                if current is not None and current[1] != base + s.row:
                    _overridden(rows, current[1], s.name, reading.path)
                winner[s.name] = (s.explicit, base + s.row, s.value)
            else:
                _overridden(rows, base + s.row, s.name, f"{rows[current[1]].file} (written there)")
        if reading.model is not None:
            model = reading.model
    return ImportedRun(files=tuple(f for _, f in readings), model=model,
                       settings={k: v[2] for k, v in winner.items()}, rows=tuple(rows),
                       origin={k: v[1] for k, v in winner.items()})


def _overridden(rows: list[ConfigRow], i: int, setting: str, by: str) -> None:
    row = rows[i]
    if row.setting != setting or "overridden" in row.note:
        return
    if row.file == by:
        return
    rows[i] = replace(row, note=f"{row.note}; overridden by {by}" if row.note else f"overridden by {by}")
