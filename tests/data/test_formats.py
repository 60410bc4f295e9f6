"""load_records: every format, bad lines counted with their line numbers, missing fields, empty files."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from memfit.data.formats import load_records
from memfit.errors import MemfitError

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"
CHAT = SHARED / "data" / "chat" / "conversations.json"

ROWS = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(5)]


def _jsonl_with_bad_lines(path: Path) -> list[str]:
    lines = [json.dumps(r) for r in ROWS]
    lines.insert(2, '{"question": "broken", "answer": ')  # line 3: truncated JSON
    lines.insert(4, "[1, 2, 3]")  # line 5: valid JSON, not an object
    lines.insert(5, "")  # line 6: blank, ignored
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_jsonl_skips_malformed_lines_with_line_numbers(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    _jsonl_with_bad_lines(p)
    loaded = load_records(p, prompt="question", completion="answer")
    assert [r["question"] for r in loaded.records] == [r["question"] for r in ROWS]
    assert [s.line for s in loaded.skipped] == [3, 5]
    assert "malformed JSON" in loaded.skipped[0].reason
    assert "not a JSON object" in loaded.skipped[1].reason
    # every usable record remembers its own line: 1, 2, 4, 7, 8
    assert loaded.lines == [1, 2, 4, 7, 8]
    assert loaded.fields == ["question", "answer"]


def test_jsonl_gz_reads_the_same(tmp_path: Path) -> None:
    plain = tmp_path / "d.jsonl"
    lines = _jsonl_with_bad_lines(plain)
    gz = tmp_path / "d.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    a = load_records(plain, prompt="question", completion="answer")
    b = load_records(gz, prompt="question", completion="answer")
    assert a.records == b.records and a.skipped == b.skipped and b.format == "jsonl"


def test_real_gsm8k_and_sharegpt_files() -> None:
    gsm = load_records(GSM8K_TEST, prompt="question", completion="answer")
    assert len(gsm) == 1319 and not gsm.skipped  # README: 1,319 test pairs
    chat = load_records(CHAT, messages="conversations")
    assert len(chat) == 500 and not chat.skipped  # README: 500 conversations
    assert chat.fields == ["id", "conversations"]


def test_json_list_object_wrapper_and_jsonl_named_json(tmp_path: Path) -> None:
    p = tmp_path / "list.json"
    p.write_text(json.dumps([*ROWS, "not a record"]))
    loaded = load_records(p, text="question")
    assert len(loaded) == 5 and [s.line for s in loaded.skipped] == [6]
    w = tmp_path / "wrapped.json"
    w.write_text(json.dumps({"version": 1, "data": ROWS}))
    assert len(load_records(w, text="question")) == 5
    jl = tmp_path / "lines.json"
    jl.write_text("\n".join(json.dumps(r) for r in ROWS))
    assert len(load_records(jl, text="answer")) == 5


def test_csv_skips_rows_with_wrong_cell_count(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "answer"])
        w.writerow(["q0", "a0"])
        w.writerow(["q1", "a1", "extra"])  # line 3
        w.writerow(["multi\nline question", "a2"])  # lines 4-5: quoted newline is one record
        w.writerow(["q3", "a3"])  # line 6
    loaded = load_records(p, prompt="question", completion="answer")
    assert [r["question"] for r in loaded.records] == ["q0", "multi\nline question", "q3"]
    assert [s.line for s in loaded.skipped] == [3]


def test_parquet_and_save_to_disk(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(ROWS)
    pq.write_table(table, tmp_path / "d.parquet")
    assert load_records(tmp_path / "d.parquet", text="answer").records == ROWS

    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "saved"))
    loaded = load_records(tmp_path / "saved", prompt="question", completion="answer")
    assert loaded.records == ROWS and loaded.format == "arrow"

    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(MemfitError, match="splits test, train"):
        load_records(tmp_path / "dd", text="question")
    assert len(load_records(tmp_path / "dd" / "train", text="question")) == 5


def test_missing_field_names_the_fields_that_exist() -> None:
    with pytest.raises(MemfitError, match=r"no field 'prompt'.*question, answer"):
        load_records(GSM8K_TEST, prompt="prompt", completion="answer")


def test_field_missing_in_some_records_is_skipped(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "a"}\n{"other": 1}\n{"text": 5}\n{"text": "b"}\n')
    loaded = load_records(p, text="text")
    assert [r["text"] for r in loaded.records] == ["a", "b"]
    assert [(s.line, s.reason.split(" (")[0]) for s in loaded.skipped] == [
        (2, "no field 'text'"), (3, "field 'text' is int, not text")]


@pytest.mark.parametrize("name, content", [("e.jsonl", ""), ("e.json", "  \n"), ("e.csv", ""),
                                           ("blank.jsonl", "\n\n")])
def test_empty_file_says_so(tmp_path: Path, name: str, content: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(MemfitError, match="is empty"):
        load_records(p, text="text")


def test_only_bad_lines_and_unknown_formats(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text("{oops\n")
    with pytest.raises(MemfitError, match="no readable record.*line 1"):
        load_records(p, text="text")
    with pytest.raises(MemfitError, match="cannot tell the format"):
        load_records(_touch(tmp_path / "d.txt"))
    with pytest.raises(MemfitError, match="no such file"):
        load_records(tmp_path / "nope.jsonl")


def _touch(p: Path) -> Path:
    p.write_text("x")
    return p


def test_chats_in_both_layouts_load_and_bad_chats_are_skipped(tmp_path: Path) -> None:
    openai = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    sharegpt = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]
    p = tmp_path / "c.jsonl"
    rows = [{"m": openai}, {"m": sharegpt}, {"m": [{"role": "wizard", "content": "x"}]},
            {"m": [{"role": "user", "content": "only a question"}]}, {"m": "text"}]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    loaded = load_records(p, messages="m")
    assert len(loaded) == 2
    assert [s.line for s in loaded.skipped] == [3, 4, 5]
    assert "unknown role 'wizard'" in loaded.skipped[0].reason
    assert "no assistant turn" in loaded.skipped[1].reason


def test_fields_inferred_when_none_named() -> None:
    # no field named: GSM8K has question/answer, which must be named; the ShareGPT file's chat is found
    with pytest.raises(MemfitError, match="--prompt FIELD --completion FIELD"):
        load_records(GSM8K_TEST)
    assert load_records(CHAT).spec.messages == "conversations"


def test_jsonl_line_that_is_not_utf8_is_counted(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"text": "caf\xc3\xa9"}\n{"text": "bad \xff byte"}\n{"text": "ok"}\n')
    loaded = load_records(p, text="text")
    assert [r["text"] for r in loaded.records] == ["caf\u00e9", "ok"]
    assert [s.line for s in loaded.skipped] == [2] and "not UTF-8" in loaded.skipped[0].reason


BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark Excel and some Windows tools write


def test_utf8_bom_keeps_the_first_jsonl_record_and_the_csv_header(tmp_path: Path) -> None:
    """Read as plain UTF-8, a BOM would make JSONL line 1 "malformed JSON" (a skip, exit 0) and the first CSV
    header "\\ufeffquestion" ("no field 'question'; its fields are: question, answer")."""
    body = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    cases = {
        "d.jsonl": BOM + body,
        "d.json": BOM + json.dumps(ROWS).encode(),
        "d.csv": BOM + b"question,answer\r\n" + b"".join(f"{r['question']},{r['answer']}\r\n".encode() for r in ROWS),
        "d.jsonl.gz": gzip.compress(BOM + body),
        "d.csv.gz": gzip.compress(BOM + b"question,answer\n" + b"q0,a0\nq1,a1\nq2,a2\nq3,a3\nq4,a4\n"),
    }
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        loaded = load_records(p, prompt="question", completion="answer")
        assert loaded.records == ROWS and not loaded.skipped, name
        assert loaded.fields == ["question", "answer"], name
        assert loaded.lines[0] == (2 if "csv" in name else 1), name
