"""``memfit pack`` and ``memfit verify-pack`` end to end on GSM8K records with a real tokenizer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memfit.cli import main

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOKENIZER = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"


@pytest.fixture(scope="module")
def gsm8k_200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = SHARED / "data" / "gsm8k" / "train.jsonl"
    path = tmp_path_factory.mktemp("data") / "gsm8k_200.jsonl"
    path.write_text("".join(src.read_text().splitlines(keepends=True)[:200]))
    return path


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_writes_rows_and_reports_efficiency(gsm8k_200: Path, tmp_path: Path, capsys) -> None:
    from tokenizers import Tokenizer

    out_file = tmp_path / "rows.jsonl"
    code, out, _ = _run(capsys, ["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                                 "--completion", "answer", "--seq-len", "512", "--out", str(out_file), "--json"])
    assert code == 0
    summary = json.loads(out)
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert summary["rows"] == len(rows)
    # Tokens by an independent count: the raw tokenizers library, question + answer (+ EOS if the tokenizer
    # declares one; the bare tokenizer.json of GPT-NeoX does not, so memfit appends none).
    tok = Tokenizer.from_file(str(TOKENIZER))
    records = [json.loads(line) for line in gsm8k_200.read_text().splitlines()]
    want = sum(len(tok.encode(r["question"]).ids) + len(tok.encode(r["answer"]).ids) for r in records)
    assert summary["tokens"] == sum(len(r["input_ids"]) for r in rows) == want
    assert summary["lower_bound_rows"] == math.ceil(want / 512)
    assert summary["efficiency"] == pytest.approx(want / (len(rows) * 512))
    assert summary["examples_per_row"] > 2
    assert sorted(e for r in rows for e in r["example_ids"]) == list(range(200))
    assert all(len(r["input_ids"]) <= 512 and r["position_ids"].count(0) == len(r["seq_lens"]) for r in rows)
    assert summary["block_mask_bytes_per_row"]["bf16"] == 512 * 512 * 2


def test_pack_parquet_and_table(gsm8k_200: Path, tmp_path: Path, capsys) -> None:
    import pyarrow.parquet as pq

    out_file = tmp_path / "rows.parquet"
    code, out, _ = _run(capsys, ["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                                 "--completion", "answer", "--seq-len", "1024", "--out", str(out_file)])
    assert code == 0
    table = pq.read_table(out_file)
    assert set(table.column_names) >= {"input_ids", "labels", "position_ids", "seq_lens", "cu_seqlens", "example_ids"}
    assert f"{table.num_rows:,}" in out and "efficiency" in out and "lower bound" in out


def test_pack_too_long_is_one_red_line(gsm8k_200: Path, tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, ["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                                   "--completion", "answer", "--seq-len", "64", "--out", str(tmp_path / "x.jsonl")])
    assert code == 1
    assert "error:" in err and "--seq-len 64" in err and "--overflow" in err and "(line " in err
    assert "Traceback" not in err and not (tmp_path / "x.jsonl").exists()
    code, out, _ = _run(capsys, ["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                                 "--completion", "answer", "--seq-len", "64", "--overflow", "drop",
                                 "--out", str(tmp_path / "x.jsonl"), "--json"])
    assert code == 0
    summary = json.loads(out)
    assert summary["dropped_examples"] > 0
    assert summary["packed_examples"] + summary["dropped_examples"] == 200


def test_verify_pack_pass_and_naive_fail(gsm8k_200: Path, capsys) -> None:
    base = ["verify-pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question", "--completion", "answer",
            "--seq-len", "512", "--limit", "6", "--json"]
    code, out, _ = _run(capsys, base)
    ok = json.loads(out)
    assert code == 0 and ok["pass"] is True and ok["examples"] == 6 and ok["rows"] < 6
    code, out, _ = _run(capsys, [*base, "--attention", "naive"])
    bad = json.loads(out)
    assert code == 1 and bad["pass"] is False
    assert bad["max_abs_logit_diff"] > 1e-2
