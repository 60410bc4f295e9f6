"""Reading training records from the files people keep data sets in.

=====================================  ==================================================================
path                                   read as
=====================================  ==================================================================
``*.jsonl``, ``*.jsonl.gz``            one JSON object per line; a bad line (malformed JSON, not an
                                       object, not UTF-8) is skipped and counted
``*.json`` (``.json.gz``)              a list of objects, or an object holding one such list (ShareGPT
                                       files are lists); a ``.json`` file that is really JSON lines is
                                       read as JSON lines
``*.csv`` (``.csv.gz``)                a header row, then one record per row (values are strings); a row
                                       with the wrong number of cells is skipped and counted
``*.parquet``                          pyarrow
a directory from ``save_to_disk``      its Arrow shards (``state.json``), read with pyarrow; ``datasets``
                                       is not needed. A ``DatasetDict`` directory names its splits.
=====================================  ==================================================================

Text is UTF-8, with or without a byte-order mark (``utf-8-sig``: Excel and some Windows tools write one;
read as plain UTF-8 it would break the first JSONL record and the first CSV header).

Nothing is lost silently: every record that cannot be used (malformed JSON, not an object, the field
missing or of the wrong type, an unknown chat role) becomes a :class:`~memfit.data.records.Skipped`
with its line number (the 1-based line of a JSONL file, the 1-based data row of a CSV / Parquet / JSON
list) and the reason, and the rest is analysed. A field missing from every record is an error naming the fields that
exist; an empty file is an error saying so.

Which fields hold the training text, and what makes a record usable, is :mod:`memfit.data.records`.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfit.data.records import FieldSpec, Skipped, check_record, infer_fields, tokenized_hint
from memfit.errors import MemfitError

__all__ = ["LoadedRecords", "load_records"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedRecords:
    """The usable records of a file (raw rows, in file order), what was skipped, and the fields seen.

    ``lines[i]`` is the 1-based line (JSONL) or row (other formats) that ``records[i]`` came from.
    ``spec`` says which fields were checked (inferred when none was named, see
    :func:`~memfit.data.records.infer_fields`).
    """

    path: str
    format: str
    records: list[dict[str, Any]]
    lines: list[int]
    skipped: list[Skipped]
    fields: list[str]
    spec: FieldSpec = field(default_factory=FieldSpec)

    def __len__(self) -> int:
        return len(self.records)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "count": len(self.records),
                "skipped": [s.to_dict() for s in self.skipped], "fields": self.fields,
                "spec": self.spec.to_dict()}


def load_records(
    path: str | Path,
    *,
    text: str | None = None,
    prompt: str | None = None,
    completion: str | None = None,
    messages: str | None = None,
) -> LoadedRecords:
    """Read the records of ``path`` and check the named fields (see the module docstring for formats).

    With no field named, the fields are inferred (:func:`~memfit.data.records.infer_fields`). Records
    lacking a field, or holding a value of the wrong type, are skipped with their line and reason; a field
    present in no record at all raises :class:`MemfitError` naming the fields that exist.
    """
    p = Path(path)
    if not p.exists():
        raise MemfitError(f"no such file or directory: {p}")
    fmt = _detect_format(p)
    rows, skipped = _READERS[fmt](p)
    if not rows and not skipped:
        raise MemfitError(f"{p} is empty: it holds no records")
    fields = _fields_seen(rows)
    if not rows:
        first = skipped[0]
        raise MemfitError(f"{p}: no readable record ({len(skipped)} skipped; line {first.line}: {first.reason})")

    spec = FieldSpec(text=text, prompt=prompt, completion=completion, messages=messages)
    if spec.mode == "none":
        spec = infer_fields(fields, path=p)
    for name in spec.names:
        if name not in fields:
            raise MemfitError(f"{p} has no field {name!r}; its fields are: {', '.join(fields) or '(none)'}"
                              + tokenized_hint(fields))

    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for line, row in rows:
        reason = check_record(row, spec)
        if reason is None:
            records.append(row)
            lines.append(line)
        else:
            skipped.append(Skipped(line=line, reason=reason))
    skipped.sort(key=lambda s: s.line)
    if not records:
        first = skipped[0]
        raise MemfitError(f"{p}: no usable record ({len(skipped)} skipped; line {first.line}: {first.reason})")
    return LoadedRecords(path=str(p), format=fmt, records=records, lines=lines, skipped=skipped, fields=fields,
                         spec=spec)


# ---------------------------------------------------------------------------------------------------
# Format readers: each returns [(line, row)] and the rows it could not parse.

_Rows = tuple[list[tuple[int, dict[str, Any]]], list[Skipped]]


def _detect_format(p: Path) -> str:
    if p.is_dir():
        if (p / "dataset_dict.json").exists():
            splits = sorted(c.name for c in p.iterdir() if c.is_dir())
            raise MemfitError(f"{p} is a DatasetDict with splits {', '.join(splits)}: pass one split's "
                              f"directory, e.g. {p / (splits[0] if splits else 'train')}")
        if (p / "state.json").exists() or list(p.glob("*.arrow")):
            return "arrow"
        raise MemfitError(f"{p} is a directory but not one written by datasets' save_to_disk "
                          "(no state.json or .arrow files)")
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"), (".csv", "csv"),
                     (".parquet", "parquet"), (".pq", "parquet"), (".arrow", "arrow")):
        if name.endswith(ext):
            return fmt
    raise MemfitError(f"cannot tell the format of {p}: use .jsonl, .jsonl.gz, .json, .csv, .parquet "
                      "or a directory from datasets' save_to_disk")


UTF8_BOM = b"\xef\xbb\xbf"


def _open_text(p: Path) -> io.TextIOBase:
    """``p`` as text: UTF-8 with an optional byte-order mark (``utf-8-sig`` drops it), gzip when ``.gz``."""
    if p.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8-sig", errors="replace", newline="")
    return open(p, encoding="utf-8-sig", errors="replace", newline="")


def _read_jsonl(p: Path) -> _Rows:
    rows: list[tuple[int, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    try:
        with gzip.open(p, "rb") if p.name.lower().endswith(".gz") else open(p, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                if line_no == 1 and raw.startswith(UTF8_BOM):  # a byte-order mark, as utf-8-sig drops it
                    raw = raw[len(UTF8_BOM):]
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    skipped.append(Skipped(line=line_no, reason=f"not UTF-8: byte {exc.start + 1} cannot be decoded"))
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    skipped.append(Skipped(line=line_no, reason=f"malformed JSON: {exc.msg} at column {exc.colno}"))
                    continue
                if isinstance(row, dict):
                    rows.append((line_no, row))
                else:
                    skipped.append(Skipped(line=line_no, reason=f"not a JSON object but {type(row).__name__}"))
    except (OSError, EOFError) as exc:
        raise MemfitError(f"cannot read {p}: {exc}") from exc
    return rows, skipped


def _read_json(p: Path) -> _Rows:
    try:
        with _open_text(p) as f:
            content = f.read()
    except (OSError, EOFError) as exc:
        raise MemfitError(f"cannot read {p}: {exc}") from exc
    if not content.strip():
        return [], []
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON lines in a .json file
            return _read_jsonl(p)
        raise MemfitError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise MemfitError(f"{p} holds a JSON object, not a list of records; expected a list "
                              "(or an object with exactly one list in it)")
        data = lists[0]
    if not isinstance(data, list):
        raise MemfitError(f"{p} holds a JSON {type(data).__name__}, not a list of records")
    rows: list[tuple[int, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    for i, row in enumerate(data, start=1):
        if isinstance(row, dict):
            rows.append((i, row))
        else:
            skipped.append(Skipped(line=i, reason=f"record {i} is not a JSON object but {type(row).__name__}"))
    return rows, skipped


def _read_csv(p: Path) -> _Rows:
    rows: list[tuple[int, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    try:
        with _open_text(p) as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return [], []
            for cells in reader:
                line_no = reader.line_num
                if not cells:
                    continue
                if len(cells) != len(header):
                    skipped.append(Skipped(line=line_no, reason=f"{len(cells)} cells where the header has "
                                                                f"{len(header)}"))
                    continue
                rows.append((line_no, dict(zip(header, cells, strict=True))))
    except csv.Error as exc:
        raise MemfitError(f"cannot parse {p} as CSV: {exc}") from exc
    except (OSError, EOFError) as exc:
        raise MemfitError(f"cannot read {p}: {exc}") from exc
    return rows, skipped


def _read_parquet(p: Path) -> _Rows:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MemfitError("reading Parquet needs pyarrow: pip install 'memfit[data]'") from exc
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise MemfitError(f"cannot read {p} as Parquet: {exc}") from exc
    return [(i, row) for i, row in enumerate(table.to_pylist(), start=1)], []


def _arrow_shards(p: Path) -> Iterator[Path]:
    if p.is_file():
        yield p
        return
    state = p / "state.json"
    if state.exists():
        try:
            files = json.loads(state.read_text())["_data_files"]
            for entry in files:
                yield p / entry["filename"]
            return
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise MemfitError(f"cannot read {state}: {exc}") from exc
    yield from sorted(p.glob("*.arrow"))


def _read_arrow(p: Path) -> _Rows:
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise MemfitError("reading a save_to_disk directory needs pyarrow: pip install 'memfit[data]'") from exc
    rows: list[tuple[int, dict[str, Any]]] = []
    n = 0
    for shard in _arrow_shards(p):
        try:
            with open(shard, "rb") as f:
                try:
                    table = pa.ipc.open_stream(f).read_all()
                except pa.ArrowInvalid:
                    f.seek(0)
                    table = pa.ipc.open_file(f).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise MemfitError(f"cannot read the Arrow shard {shard}: {exc}") from exc
        for row in table.to_pylist():
            n += 1
            rows.append((n, row))
    return rows, []


_READERS = {"jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv, "parquet": _read_parquet,
            "arrow": _read_arrow}


def _fields_seen(rows: list[tuple[int, dict[str, Any]]]) -> list[str]:
    seen: dict[str, None] = {}
    for _, row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)
