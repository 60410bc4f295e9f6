"""The format readers behind :func:`memfit.data.formats.open_records`: one per format, each returning an
iterator of ``(line, row)`` that appends the rows it cannot parse to ``skipped``, and the
:class:`ReadPosition` it has read to (for progress bars). The formats and what counts as a bad row are in
:mod:`memfit.data.formats`' docstring.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from memfit.data.records import Skipped
from memfit.errors import MemfitError

__all__ = ["READERS", "ReadPosition", "detect_format"]

BATCH_ROWS = 1024  # Parquet / Arrow rows converted to Python at a time
CSV_FIELD_LIMIT = 2**31 - 1  # csv's default limit is 131,072 characters: a long document is one cell

UTF8_BOM = b"\xef\xbb\xbf"


class ReadPosition:
    """How far a reader has got: bytes of the file (JSONL, CSV, JSON, Arrow) or rows (Parquet)."""

    def __init__(self, total: int, unit: str) -> None:
        self.total = total
        self.unit = unit
        self.done = 0
        self.probe: Callable[[], int] | None = None

    def now(self) -> int:
        if self.probe is not None:
            with contextlib.suppress(OSError, ValueError):
                self.done = self.probe()
        return self.done


_Reader = Callable[[Path, list[Skipped]], tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]]


def detect_format(p: Path) -> str:
    if p.is_dir():
        if (p / "dataset_dict.json").exists():
            splits = sorted(c.name for c in p.iterdir() if c.is_dir())
            raise MemfitError(f"{p} is a DatasetDict with splits {', '.join(splits)}",
                              hint=f"pass one split's directory, e.g. {p / (splits[0] if splits else 'train')}")
        if (p / "state.json").exists() or list(p.glob("*.arrow")):
            return "arrow"
        raise MemfitError(f"{p} is a directory but not one written by datasets' save_to_disk "
                          "(no state.json or .arrow files)",
                          hint="pass a data file, or the directory save_to_disk wrote")
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"), (".csv", "csv"),
                     (".parquet", "parquet"), (".pq", "parquet"), (".arrow", "arrow")):
        if name.endswith(ext):
            return fmt
    raise MemfitError(f"cannot tell the format of {p}: use .jsonl, .jsonl.gz, .json, .csv, .parquet "
                      "or a directory from datasets' save_to_disk")


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


@contextlib.contextmanager
def _binary(p: Path, position: ReadPosition) -> Iterator[BinaryIO]:
    """``p`` as bytes, gunzipped when ``.gz``; ``position`` follows the bytes read of the file on disk."""
    try:
        raw = open(p, "rb")  # noqa: SIM115  (closed below)
    except OSError as exc:
        raise MemfitError(f"cannot read {p} ({exc.strerror or exc})", hint="check the path and its permissions") \
            from exc
    position.probe = raw.tell
    try:
        if p.name.lower().endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as g:
                yield g  # type: ignore[misc]
        else:
            yield raw
    finally:
        raw.close()


def _read_failure(p: Path, exc: BaseException) -> MemfitError:
    """A file that stops making sense part way: a truncated or corrupt gzip, an I/O error."""
    if isinstance(exc, EOFError):
        why = "the gzip stream ends early: the file is truncated"
    elif isinstance(exc, gzip.BadGzipFile | zlib.error):
        why = f"it is not valid gzip ({exc})"
    else:
        why = str(getattr(exc, "strerror", None) or exc)
    return MemfitError(f"cannot read {p}: {why}", hint="re-download or re-compress the file")


def _parse_json(text: str | bytes) -> Any:
    """``json.loads``, with the ways it fails on hostile text as one ValueError: malformed JSON, nesting deeper
    than the parser's recursion allows (RecursionError), an integer of more than 4,300 digits (ValueError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested deeper than the JSON parser allows") from None


def _read_jsonl(p: Path, skipped: list[Skipped]) -> tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]:
    position = ReadPosition(_size(p), "bytes")

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        with _binary(p, position) as f:
            line_no = 0
            try:
                for raw in f:
                    line_no += 1
                    if line_no == 1 and raw.startswith(UTF8_BOM):  # a byte-order mark, as utf-8-sig drops it
                        raw = raw[len(UTF8_BOM):]
                    if not raw.strip():
                        continue
                    try:
                        line = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        skipped.append(Skipped(line=line_no, reason=f"not UTF-8: byte {exc.start + 1} cannot be "
                                                                    "decoded"))
                        continue
                    try:
                        row = _parse_json(line)
                    except json.JSONDecodeError as exc:
                        skipped.append(Skipped(line=line_no, reason=f"malformed JSON: {exc.msg} at column "
                                                                    f"{exc.colno}"))
                        continue
                    except ValueError as exc:
                        skipped.append(Skipped(line=line_no, reason=f"malformed JSON: {exc}"))
                        continue
                    if isinstance(row, dict):
                        yield line_no, row
                    else:
                        skipped.append(Skipped(line=line_no, reason=f"not a JSON object but {type(row).__name__}"))
            except (OSError, EOFError, zlib.error) as exc:
                raise _read_failure(p, exc) from exc

    return rows(), position


def _read_text(p: Path, position: ReadPosition) -> str:
    with _binary(p, position) as f:
        try:
            data = f.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise _read_failure(p, exc) from exc
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    return data.decode("utf-8", errors="replace")


def _read_json(p: Path, skipped: list[Skipped]) -> tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]:
    position = ReadPosition(_size(p), "bytes")
    content = _read_text(p, position)
    if not content.strip():
        return iter(()), position
    try:
        data = _parse_json(content)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON lines in a .json file
            del content
            return _read_jsonl(p, skipped)
        raise MemfitError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                          hint="fix the file, or save it as JSON lines (.jsonl)") from exc
    except ValueError as exc:
        raise MemfitError(f"{p} is not valid JSON: {exc}", hint="fix the file, or save it as JSON lines (.jsonl)") \
            from exc
    del content
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise MemfitError(f"{p} holds a JSON object, not a list of records; expected a list "
                              "(or an object with exactly one list in it)")
        data = lists[0]
    if not isinstance(data, list):
        raise MemfitError(f"{p} holds a JSON {type(data).__name__}, not a list of records")
    records: list[Any] = data

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        for i, row in enumerate(records, start=1):
            if isinstance(row, dict):
                yield i, row
            else:
                skipped.append(Skipped(line=i, reason=f"record {i} is not a JSON object but {type(row).__name__}"))

    return rows(), position


def _read_csv(p: Path, skipped: list[Skipped]) -> tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]:
    position = ReadPosition(_size(p), "bytes")

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        old_limit = csv.field_size_limit(CSV_FIELD_LIMIT)
        try:
            with _binary(p, position) as f:
                text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline="")
                reader = csv.reader(text)
                try:
                    header = next(reader, None)
                    if header is None:
                        return
                    for cells in reader:
                        line_no = reader.line_num
                        if not cells:
                            continue
                        if len(cells) != len(header):
                            skipped.append(Skipped(line=line_no, reason=f"{len(cells)} cells where the header has "
                                                                        f"{len(header)}"))
                            continue
                        yield line_no, dict(zip(header, cells, strict=True))
                except csv.Error as exc:
                    raise MemfitError(f"cannot parse {p} as CSV: {exc}",
                                      hint="fix the file or save it as JSON lines (.jsonl)") from exc
                except (OSError, EOFError, zlib.error) as exc:
                    raise _read_failure(p, exc) from exc
        finally:
            csv.field_size_limit(old_limit)

    return rows(), position


def _read_parquet(p: Path, skipped: list[Skipped]) -> tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MemfitError("reading Parquet needs pyarrow", hint="pip install 'memfit[data]'") from exc
    try:
        pf = pq.ParquetFile(p)
        total = int(pf.metadata.num_rows)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise MemfitError(f"cannot read {p} as Parquet: {exc}", hint="pass a Parquet file, or JSON lines") from exc
    position = ReadPosition(total, "rows")

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        n = 0
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS):
                for row in batch.to_pylist():
                    n += 1
                    position.done = n
                    yield n, row
        except Exception as exc:
            if isinstance(exc, MemfitError):
                raise
            raise MemfitError(f"cannot read {p} as Parquet after row {n:,}: {exc}",
                              hint="re-write the file, or pass JSON lines") from exc
        finally:
            pf.close()

    return rows(), position


def _arrow_shards(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    state = p / "state.json"
    if state.exists():
        try:
            files = json.loads(state.read_text())["_data_files"]
            shards = [p / entry["filename"] for entry in files]
        except (KeyError, TypeError, ValueError, RecursionError, OSError) as exc:
            raise MemfitError(f"cannot read {state}: {exc}",
                              hint="pass the directory datasets' save_to_disk wrote, unedited") from exc
        for shard in shards:
            if not shard.resolve().is_relative_to(p.resolve()):
                raise MemfitError(f"{state} names {shard}, outside {p}",
                                  hint="pass the directory datasets' save_to_disk wrote, unedited")
        return shards
    return sorted(p.glob("*.arrow"))


def _read_arrow(p: Path, skipped: list[Skipped]) -> tuple[Iterator[tuple[int, dict[str, Any]]], ReadPosition]:
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise MemfitError("reading a save_to_disk directory needs pyarrow", hint="pip install 'memfit[data]'") \
            from exc
    shards = _arrow_shards(p)
    sizes = [_size(s) for s in shards]
    position = ReadPosition(sum(sizes), "bytes")

    def batches(f: BinaryIO) -> Iterator[Any]:
        try:
            yield from pa.ipc.open_stream(f)
        except pa.ArrowInvalid:
            f.seek(0)
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        n = 0
        before = 0
        for shard, size in zip(shards, sizes, strict=True):
            try:
                with open(shard, "rb") as f:
                    position.probe = lambda f=f, before=before: before + f.tell()  # type: ignore[misc]
                    for batch in batches(f):
                        for row in batch.to_pylist():
                            n += 1
                            yield n, row
            except (OSError, pa.ArrowInvalid) as exc:
                raise MemfitError(f"cannot read the Arrow shard {shard}: {exc}",
                                  hint="pass the directory datasets' save_to_disk wrote, unedited") from exc
            before += size
        position.probe = None
        position.done = position.total

    return rows(), position


READERS: dict[str, _Reader] = {"jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv,
                                "parquet": _read_parquet, "arrow": _read_arrow}
