"""Writing packed rows to a file: JSON lines or Parquet, every field of a row, no partial file on failure.

A ``.jsonl`` file holds one JSON object per row; a ``.parquet`` file one record per row, each field a list of
int32 (token ids are below 2**31). Both carry every field of :class:`~memfit.data.pack.PackedRow`
(``input_ids``, ``labels``, ``position_ids``, ``seq_lens``, ``cu_seqlens``, ``example_ids``,
``example_offsets``), so the rows can be read back and collated (:mod:`memfit.data.torch.collator`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from memfit.data.pack import PackedRow, PackResult
from memfit.errors import MemfitError

__all__ = ["check_out_path", "write_rows"]


def check_out_path(path: str | Path) -> Path:
    """Check before any work that packed rows can be written to ``path``: ``.jsonl`` or ``.parquet``, not a
    directory, in an existing folder that accepts a new file (probed with a temporary file there, removed at
    once: permission bits say nothing for root, and ``/proc`` or ``/sys`` refuse files whatever they say).
    Returns the path; raises a MemfitError naming the fix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise MemfitError(f"--out must end in .jsonl or .parquet, not {p.name!r}")
    if p.is_dir():
        raise MemfitError(f"--out {p} is a directory: name a file, e.g. {p / ('rows' + suffix)}")
    if not p.parent.is_dir():
        raise MemfitError(f"--out {p}: the folder {p.parent} does not exist; create it or choose another --out")
    if p.exists() and not p.is_file():
        raise MemfitError(f"--out {p} exists and is not a regular file: choose another --out")
    try:
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=".memfit-probe-"):
            pass
    except OSError as exc:
        raise MemfitError(f"--out {p}: cannot write in {p.parent} ({exc.strerror or exc}); choose a folder you "
                          "can write to") from exc
    return p


def write_rows(result: PackResult, path: str | Path) -> int:
    """Write the packed rows to ``path`` (``.jsonl`` or ``.parquet``), one row per line / record, with every
    field of :class:`~memfit.data.pack.PackedRow`. Returns the bytes written. A path that cannot be written
    is a MemfitError (:func:`check_out_path`), and a write that fails part way leaves no partial file."""
    p = check_out_path(path)
    existed = p.exists()
    try:
        if p.suffix.lower() == ".jsonl":
            with p.open("w", encoding="utf-8") as f:
                for row in result.rows:
                    f.write(json.dumps(row.to_dict(), separators=(",", ":")) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            names = list(PackedRow.__slots__)  # every field is a list of int32 (token ids < 2**31)
            table = pa.table({name: pa.array([getattr(r, name) for r in result.rows], type=pa.list_(pa.int32()))
                              for name in names})
            try:
                pq.write_table(table, p)
            except pa.ArrowException as exc:  # pyarrow's own I/O errors (most are OSError subclasses too)
                raise OSError(str(exc)) from exc
        return p.stat().st_size
    except OSError as exc:
        if not existed:
            p.unlink(missing_ok=True)
        raise MemfitError(f"cannot write the rows to {p}: {exc}") from exc
