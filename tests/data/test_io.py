"""write_rows: JSONL and Parquet round trips with every field, paths that cannot be written, no partial file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.data.io import check_out_path, write_rows
from memfit.data.pack import PackedRow, pack
from memfit.errors import MemfitError

EXAMPLES = [
    {"input_ids": [11, 12, 13], "labels": [-100, -100, 13]},
    {"input_ids": [21, 22], "labels": [21, 22]},
    {"input_ids": [31, 32, 33, 34, 35], "labels": [-100, 32, 33, 34, 35]},
]
# The rows by hand (tests/data/test_pack.py works the layout): C + A, then B.
ROW_1 = {"input_ids": [31, 32, 33, 34, 35, 11, 12, 13], "labels": [-100, 32, 33, 34, 35, -100, -100, 13],
         "position_ids": [0, 1, 2, 3, 4, 0, 1, 2], "seq_lens": [5, 3], "cu_seqlens": [0, 5, 8],
         "example_ids": [2, 0], "example_offsets": [0, 0]}
ROW_2 = {"input_ids": [21, 22], "labels": [-100, 22], "position_ids": [0, 1], "seq_lens": [2],
         "cu_seqlens": [0, 2], "example_ids": [1], "example_offsets": [0]}


def test_jsonl_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    size = write_rows(pack(EXAMPLES, 8), out)
    assert size == out.stat().st_size
    assert [json.loads(line) for line in out.read_text().splitlines()] == [ROW_1, ROW_2]


def test_parquet_round_trip_has_every_field_as_int32_lists(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    out = tmp_path / "rows.parquet"
    write_rows(pack(EXAMPLES, 8), out)
    table = pq.read_table(out)
    assert table.column_names == list(PackedRow.__slots__) == list(ROW_1)
    assert all(table.schema.field(name).type == pa.list_(pa.int32()) for name in table.column_names)
    assert table.to_pylist() == [ROW_1, ROW_2]


def test_paths_that_cannot_be_written(tmp_path: Path) -> None:
    res = pack(EXAMPLES, 8)
    with pytest.raises(MemfitError, match=r"\.jsonl or \.parquet"):
        write_rows(res, tmp_path / "rows.csv")
    with pytest.raises(MemfitError, match="does not exist"):
        write_rows(res, tmp_path / "missing" / "rows.jsonl")
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(MemfitError, match="is a directory"):
        check_out_path(tmp_path / "d.jsonl")
    assert check_out_path(tmp_path / "ok.JSONL") == tmp_path / "ok.JSONL"
    assert not list(tmp_path.glob(".memfit-probe-*"))  # the write probe leaves nothing behind


def test_a_write_that_fails_part_way_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def dumps(obj: object, **kwargs: object) -> str:
        calls.append(obj)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return json.JSONEncoder(separators=(",", ":")).encode(obj)

    monkeypatch.setattr("memfit.data.io.json.dumps", dumps)
    out = tmp_path / "rows.jsonl"
    with pytest.raises(MemfitError, match=r"cannot write .*rows\.jsonl \(No space left on device\): free some space"):
        write_rows(pack(EXAMPLES, 8), out)
    assert len(calls) == 2 and not out.exists()
    assert not list(tmp_path.iterdir())  # nor its temporary file
