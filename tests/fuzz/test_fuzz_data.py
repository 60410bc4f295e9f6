"""The data loaders, fuzzed: JSON lines (.gz too, truncated too), JSON lists, CSV, Parquet and ShareGPT chats
with mixed schemas, wrong types, malformed and non-UTF-8 lines, a byte-order mark, lines nested deeper than
the JSON parser goes, integers of thousands of digits, and long lines. Each file gives its usable records and
every other line counted as skipped with its line number (nothing lost, nothing twice), or one MemfitError."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

from fuzzing import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memfit.errors import MemfitError

FIELDS = ["text", "prompt", "completion", "messages", "conversations", "id", "input_ids"]
roles = st.sampled_from(["user", "assistant", "system", "human", "gpt", "tool", "wizard", "", "USER"])
chat = st.lists(st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(st.text(max_size=20), st.integers())}),
    st.fixed_dictionaries({"from": roles, "value": st.text(max_size=20)}),
    st.dictionaries(st.sampled_from(["role", "from", "x"]), st.text(max_size=5), max_size=2),
    st.text(max_size=3)), max_size=4)
value = st.one_of(st.text(max_size=40), st.integers(), st.none(), st.booleans(), chat,
                  st.lists(st.integers(0, 50), max_size=4), st.text(max_size=3).map(lambda t: t * 2000))
record = st.dictionaries(st.sampled_from(FIELDS), value, max_size=4)

BAD_LINES = [b"{oops", b"[1, 2, 3]", b'"a string"', b"\xff\xfe not utf-8", b'{"text": "caf\xe9"}',
             b"[" * 3000 + b"]" * 3000, b'{"text": ' + b"9" * 5000 + b"}", b"null", b'{"text": "a"} trailing',
             b"   ", b""]
line = st.one_of(record.map(lambda r: json.dumps(r).encode()), st.sampled_from(BAD_LINES),
                 st.binary(max_size=30))
field_choice = st.sampled_from([{}, {"text": "text"}, {"prompt": "prompt", "completion": "completion"},
                                {"messages": "messages"}, {"messages": "conversations"}, {"text": "missing"}])


def _accounted(loaded: Any, numbers: list[int]) -> None:
    """Every non-blank line is a record or a skip, once, at its own number."""
    seen = sorted([*loaded.lines, *(s.line for s in loaded.skipped)])
    assert seen == numbers, (seen, numbers)
    assert len(loaded.records) == len(loaded.lines) > 0
    assert all(s.reason and "\n" not in s.reason for s in loaded.skipped)


@settings(max_examples=examples(200))
@given(lines=st.lists(line, max_size=12), bom=st.booleans(), gz=st.sampled_from(["no", "no", "gz", "truncated"]),
       fields=field_choice)
@example(lines=[b"[" * 3000 + b"]" * 3000, b'{"text": "ok"}'], bom=False, gz="no", fields={"text": "text"})
@example(lines=[b'{"text": ' + b"9" * 5000 + b"}", b'{"text": "ok"}'], bom=False, gz="no", fields={"text": "text"})
def test_jsonl_every_line_is_a_record_or_a_counted_skip(tmp_path_factory: Any, lines: list[bytes], bom: bool,
                                                        gz: str, fields: dict[str, str]) -> None:
    from memfit.data.formats import load_records

    body = b"\n".join(lines) + b"\n"
    if bom:
        body = b"\xef\xbb\xbf" + body
    folder: Path = tmp_path_factory.mktemp("jsonl")
    path = folder / ("d.jsonl.gz" if gz != "no" else "d.jsonl")
    data = gzip.compress(body) if gz != "no" else body
    if gz == "truncated":
        data = data[: len(data) // 2]
    path.write_bytes(data)
    try:
        loaded = load_records(path, **fields)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert gz != "truncated"  # a cut gzip stream is an error, never a silent partial read
    split = body[3:] if bom else body
    numbers = [i for i, raw in enumerate(split.split(b"\n")[:-1], start=1) if raw.strip()]
    _accounted(loaded, numbers)


@settings(max_examples=examples(80))
@given(rows=st.lists(st.one_of(record, st.integers(), st.text(max_size=5)), max_size=8),
       wrap=st.sampled_from(["list", "object", "two-lists", "scalar"]), fields=field_choice)
def test_json_list_or_wrapper_is_records_or_one_error(tmp_path_factory: Any, rows: list[Any], wrap: str,
                                                      fields: dict[str, str]) -> None:
    from memfit.data.formats import load_records

    doc = {"list": rows, "object": {"version": 1, "data": rows}, "two-lists": {"a": rows, "b": rows},
           "scalar": 3}[wrap]
    path: Path = tmp_path_factory.mktemp("json") / "d.json"
    path.write_text(json.dumps(doc))
    try:
        loaded = load_records(path, **fields)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert wrap in ("list", "object")
    _accounted(loaded, list(range(1, len(rows) + 1)))


cell = st.one_of(st.text(max_size=15), st.sampled_from(['"', '""', "a,b", "line\nbreak", "\r", "\x00"]),
                 st.text(max_size=2).map(lambda t: t * 70_000))


@settings(max_examples=examples(80))
@given(header=st.lists(st.sampled_from(FIELDS[:4] + ["x"]), min_size=1, max_size=4, unique=True),
       rows=st.lists(st.lists(cell, max_size=5), max_size=6), fields=field_choice)
def test_csv_rows_are_records_or_counted_skips(tmp_path_factory: Any, header: list[str], rows: list[list[str]],
                                               fields: dict[str, str]) -> None:
    from memfit.data.formats import load_records

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    path: Path = tmp_path_factory.mktemp("csv") / "d.csv"
    path.write_text(buf.getvalue(), encoding="utf-8")
    try:
        loaded = load_records(path, **fields)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    nonempty = [r for r in rows if r]
    assert len(loaded.records) + len(loaded.skipped) == len(nonempty)
    assert all(len(r) == len(header) for r in loaded.records)


@settings(max_examples=examples(40))
@given(rows=st.lists(st.fixed_dictionaries({}, optional={"text": st.one_of(st.text(max_size=20), st.none()),
                                                         "prompt": st.text(max_size=10),
                                                         "completion": st.text(max_size=10)}), max_size=6),
       fields=field_choice, corrupt=st.booleans())
def test_parquet_rows_are_records_or_one_error(tmp_path_factory: Any, rows: list[dict[str, Any]],
                                               fields: dict[str, str], corrupt: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from memfit.data.formats import load_records

    path: Path = tmp_path_factory.mktemp("pq") / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({"text": pa.array([], pa.string())}), path)
    if corrupt:
        path.write_bytes(path.read_bytes()[: max(8, path.stat().st_size // 2)])
    try:
        loaded = load_records(path, **fields)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert not corrupt
    _accounted(loaded, list(range(1, len(rows) + 1)))
