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

Records are streamed: :func:`open_records` reads them as they are consumed (JSON lines line by line, CSV row
by row, Parquet and Arrow a record batch at a time), so a data set of millions of records is measured and
packed in bounded memory. A ``.json`` list is one JSON document and is read whole; keep large data in JSON
lines. The fields are inferred, and the named fields checked, on the first :data:`PEEK` records (all of them
for a smaller file): a field none of them has is an error at once, not after reading a gigabyte.

Nothing is lost silently: every record that cannot be used (malformed JSON, not an object, the field
missing or of the wrong type, an unknown chat role) becomes a :class:`~memfit.data.records.Skipped`
with its line number (the 1-based line of a JSONL file, the 1-based data row of a CSV / Parquet / JSON
list) and the reason, and the rest is analysed. A field missing from every record (of the first :data:`PEEK`)
is an error naming the fields that exist; an empty file is an error saying so. Text is never evaluated: JSON
through :mod:`json` (a line nested deeper than the parser allows, or an integer of more than 4,300 digits, is
a skipped line like any malformed one), CSV cells as strings, Parquet and Arrow through pyarrow.

Which fields hold the training text, and what makes a record usable, is :mod:`memfit.data.records`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfit.data.readers import READERS, ReadPosition, detect_format
from memfit.data.records import FieldSpec, Skipped, check_record, infer_fields, tokenized_hint
from memfit.errors import MemfitError

__all__ = ["PEEK", "LoadedRecords", "RecordStream", "load_records", "open_records"]

PEEK = 1000  # records read ahead to infer the fields and check the named ones


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


class RecordStream:
    """The usable records of one file, read as they are consumed: iterate for ``(line, record)``.

    Made by :func:`open_records`, which has already read the first :data:`PEEK` records to settle ``spec``.
    While (and after) iterating, ``skipped`` holds every record left out with its line and reason, in file
    order, ``fields`` every field seen, and ``used`` the records handed out. :meth:`progress` says how far the
    reading has got (for a progress bar). Iterate once.
    """

    def __init__(self, path: Path, fmt: str, rows: Iterator[tuple[int, dict[str, Any]]], position: ReadPosition,
                 skipped: list[Skipped], spec: FieldSpec) -> None:
        self.path = path
        self.format = fmt
        self.spec = spec
        self.skipped = skipped
        self.used = 0
        self._rows = rows
        self._position = position
        self._seen: dict[str, None] = {}
        self._buffer: list[tuple[int, dict[str, Any]]] = []
        self._started = False

    @property
    def fields(self) -> list[str]:
        return list(self._seen)

    def progress(self) -> tuple[int, int, str]:
        """``(done, total, unit)``: bytes read of the file, or rows for Parquet."""
        return self._position.now(), self._position.total, self._position.unit

    def _peek(self) -> list[tuple[int, dict[str, Any]]]:
        for line, row in self._rows:
            self._buffer.append((line, row))
            self._see(row)
            if len(self._buffer) >= PEEK:
                break
        return self._buffer

    def _see(self, row: dict[str, Any]) -> None:
        for key in row:
            self._seen.setdefault(str(key), None)

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if self._started:
            raise RuntimeError("a RecordStream is read once")
        self._started = True
        buffered, self._buffer = self._buffer, []
        for line, row in buffered:
            yield from self._use(line, row)
        for line, row in self._rows:
            self._see(row)
            yield from self._use(line, row)
        self.skipped.sort(key=lambda s: s.line)
        if not self.used:
            first = self.skipped[0]
            raise MemfitError(f"{self.path}: no usable record ({len(self.skipped):,} skipped; line {first.line}: "
                              f"{first.reason})")

    def _use(self, line: int, row: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
        reason = check_record(row, self.spec)
        if reason is None:
            self.used += 1
            yield line, row
        else:
            self.skipped.append(Skipped(line=line, reason=reason))


def open_records(
    path: str | Path,
    *,
    text: str | None = None,
    prompt: str | None = None,
    completion: str | None = None,
    messages: str | None = None,
) -> RecordStream:
    """Open ``path`` for streaming its records (the module docstring lists the formats).

    Reads the first :data:`PEEK` records now: with no field named, the fields are inferred from them
    (:func:`~memfit.data.records.infer_fields`); a named field that none of them has raises a MemfitError
    naming the fields that exist, as does an empty file or one with no readable record. Records lacking a
    field, or holding a value of the wrong type, are skipped later, with their line and reason.
    """
    p = Path(path)
    if not p.exists():
        raise MemfitError(f"no such file or directory: {p}",
                          hint="pass a JSONL, JSON, CSV or Parquet file, or a save_to_disk directory")
    fmt = detect_format(p)
    skipped: list[Skipped] = []
    rows, position = READERS[fmt](p, skipped)
    spec = FieldSpec(text=text, prompt=prompt, completion=completion, messages=messages)
    stream = RecordStream(p, fmt, rows, position, skipped, spec)
    window = stream._peek()
    fields = stream.fields
    if not window:
        if not skipped:
            raise MemfitError(f"{p} is empty: it holds no records")
        first = skipped[0]
        raise MemfitError(f"{p}: no readable record ({len(skipped):,} skipped; line {first.line}: {first.reason})")
    if spec.mode == "none":
        spec = infer_fields(fields, path=p)
        stream.spec = spec
    complete = len(window) < PEEK
    for name in spec.names:
        if name not in fields:
            which = "" if complete else f" in its first {PEEK:,} records"
            raise MemfitError(f"{p} has no field {name!r}{which}; its fields are: {', '.join(fields) or '(none)'}"
                              + tokenized_hint(fields))
    return stream


def load_records(
    path: str | Path,
    *,
    text: str | None = None,
    prompt: str | None = None,
    completion: str | None = None,
    messages: str | None = None,
) -> LoadedRecords:
    """Read every usable record of ``path`` into memory (:func:`open_records`, then the whole stream).

    With no field named, the fields are inferred (:func:`~memfit.data.records.infer_fields`). Records
    lacking a field, or holding a value of the wrong type, are skipped with their line and reason; a field
    present in no record at all raises :class:`MemfitError` naming the fields that exist.
    """
    stream = open_records(path, text=text, prompt=prompt, completion=completion, messages=messages)
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for line, row in stream:
        records.append(row)
        lines.append(line)
    return LoadedRecords(path=str(stream.path), format=stream.format, records=records, lines=lines,
                         skipped=stream.skipped, fields=stream.fields, spec=stream.spec)
