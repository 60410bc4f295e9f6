"""Writing packed rows to a file: JSON lines or Parquet, every field of a row, row by row, no partial file.

A ``.jsonl`` file holds one JSON object per row; a ``.parquet`` file one record per row, each field a list of
int32 (token ids are below 2**31), in row groups of :data:`PARQUET_ROWS_PER_GROUP` rows. Both carry every field
of :class:`~memfit.data.pack.PackedRow` (``input_ids``, ``labels``, ``position_ids``, ``seq_lens``,
``cu_seqlens``, ``example_ids``, ``example_offsets``), so the rows can be read back and collated
(:mod:`memfit.data.torch.collator`).

:class:`RowWriter` writes rows as they are built (``memfit pack`` streams them from
:func:`~memfit.data.pack.pack_stream`), so memory holds one row (one row group for Parquet), never the data
set. Every file goes through :func:`memfit.files.atomic_output`: a temporary file beside the target, renamed
when complete; an existing file is replaced only with ``--force``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memfit.data.pack import PackedRow, PackResult, RowArrays
from memfit.errors import MemfitError
from memfit.files import atomic_output, check_output

__all__ = ["OUT_SUFFIXES", "PARQUET_ROWS_PER_GROUP", "RowWriter", "check_out_path", "open_rows", "write_rows"]

OUT_SUFFIXES = (".jsonl", ".parquet")
PARQUET_ROWS_PER_GROUP = 1024  # 1,024 rows of 2,048 tokens x 7 int32 columns: ~60 MB buffered at most


def check_out_path(path: str | Path, *, force: bool = False) -> Path:
    """Check before any work that packed rows can be written to ``path``: ``.jsonl`` or ``.parquet``, and
    :func:`memfit.files.check_output` (not a directory, an existing folder that accepts a new file, an existing
    file only with ``force``). Returns the path; raises a MemfitError naming the fix."""
    p = Path(path)
    if p.suffix.lower() not in OUT_SUFFIXES:
        raise MemfitError(f"--out must end in .jsonl or .parquet, not {p.name!r}",
                          hint="name the file rows.jsonl or rows.parquet")
    return check_output(p, flag="--out", force=force, example="rows")


class RowWriter:
    """Writes rows to an open temporary file, one at a time: ``write(row)`` takes a
    :class:`~memfit.data.pack.RowArrays` or a :class:`~memfit.data.pack.PackedRow`."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt
        self.rows = 0
        self._file: Any = None
        self._parquet: Any = None
        self._group: list[dict[str, np.ndarray]] = []

    def __enter__(self) -> RowWriter:
        if self.format == "jsonl":
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115  (closed in __exit__)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pa.schema([(name, pa.list_(pa.int32())) for name in PackedRow.__slots__])
            self._parquet = pq.ParquetWriter(self.path, schema)
        return self

    def write(self, row: RowArrays | PackedRow) -> None:
        columns = row.columns() if isinstance(row, RowArrays) else {k: np.asarray(v, dtype=np.int64)
                                                                    for k, v in row.to_dict().items()}
        if self._file is not None:
            self._file.write(json.dumps({k: v.tolist() for k, v in columns.items()}, separators=(",", ":")) + "\n")
        else:
            self._group.append(columns)
            if len(self._group) >= PARQUET_ROWS_PER_GROUP:
                self._flush()
        self.rows += 1

    def _flush(self) -> None:
        if not self._group:
            return
        import pyarrow as pa

        arrays = []
        for name in PackedRow.__slots__:
            parts = [g[name] for g in self._group]
            offsets = np.concatenate(([0], np.cumsum([p.size for p in parts]))).astype(np.int32)
            values = pa.array(np.concatenate(parts).astype(np.int32), type=pa.int32())
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values))
        try:
            self._parquet.write_table(pa.Table.from_arrays(arrays, names=list(PackedRow.__slots__)))
        except pa.ArrowException as exc:  # pyarrow's own I/O errors (most are OSError subclasses too)
            raise OSError(str(exc)) from exc
        self._group = []

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if self._parquet is not None:
                if kind is None:
                    self._flush()
                self._parquet.close()
        finally:
            if self._file is not None:
                self._file.close()


@contextmanager
def open_rows(path: str | Path, *, force: bool = False) -> Iterator[RowWriter]:
    """A :class:`RowWriter` on a temporary file beside ``path`` that becomes ``path`` when the block ends
    normally (:func:`memfit.files.atomic_output`); an error or an interrupt leaves no file."""
    p = check_out_path(path, force=force)
    fmt = p.suffix.lower().lstrip(".")
    with atomic_output(p, flag="--out", force=force) as tmp, RowWriter(tmp, fmt) as writer:
        yield writer


def write_rows(result: PackResult, path: str | Path, *, force: bool = False) -> int:
    """Write the packed rows of :func:`~memfit.data.pack.pack` to ``path`` (``.jsonl`` or ``.parquet``), one row
    per line / record, with every field of :class:`~memfit.data.pack.PackedRow`. Returns the bytes written. A
    path that cannot be written is a MemfitError (:func:`check_out_path`), and a write that fails part way
    leaves no file."""
    with open_rows(path, force=force) as writer:
        for row in result.rows:
            writer.write(row)
    return Path(path).stat().st_size
