"""``memfit pack`` end to end on GSM8K records with a real tokenizer: rows and efficiency against the raw
tokenizers library, Parquet, the in/out accounting against sentencepiece, the EOS rule, unwritable --out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOKENIZER = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"


def test_pack_writes_rows_and_reports_efficiency(gsm8k_200: Path, tmp_path: Path, cli) -> None:
    from tokenizers import Tokenizer

    out_file = tmp_path / "rows.jsonl"
    code, out, _ = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
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


def test_pack_parquet_and_table(gsm8k_200: Path, tmp_path: Path, cli) -> None:
    import pyarrow.parquet as pq

    out_file = tmp_path / "rows.parquet"
    code, out, _ = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                       "--completion", "answer", "--seq-len", "1024", "--out", str(out_file)])
    assert code == 0
    table = pq.read_table(out_file)
    assert set(table.column_names) >= {"input_ids", "labels", "position_ids", "seq_lens", "cu_seqlens", "example_ids"}
    assert f"{table.num_rows:,}" in out and "efficiency" in out and "lower bound" in out


def test_pack_too_long_is_one_red_line(gsm8k_200: Path, tmp_path: Path, cli) -> None:
    code, out, err = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                         "--completion", "answer", "--seq-len", "64", "--out", str(tmp_path / "x.jsonl")])
    assert code == 1
    assert "error:" in err and "--seq-len 64" in err and "--overflow" in err and "(line " in err
    assert "Traceback" not in err and not (tmp_path / "x.jsonl").exists()
    code, out, _ = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                       "--completion", "answer", "--seq-len", "64", "--overflow", "drop",
                       "--out", str(tmp_path / "x.jsonl"), "--json"])
    assert code == 0
    summary = json.loads(out)
    assert summary["dropped_examples"] > 0
    assert summary["packed_examples"] + summary["dropped_examples"] == 200


LLAMA2 = SHARED / "tokenizers" / "llama2"


def test_pack_truncate_reports_every_example_token_and_loss_token_in_and_out(gsm8k_200: Path, tmp_path: Path,
                                                                             cli) -> None:
    """GSM8K with Llama 2 at --seq-len 64, --overflow truncate: truncation cuts most loss tokens, and examples
    whose prompt alone is 64+ tokens would be rows that train nothing (they are left out, and counted). The
    oracle is the sentencepiece library: per example, prompt P = 1 (BOS) + len(question), completion
    C = len(answer) + 1 (EOS), length L = P + C. Alone it trains on C tokens. Truncated to
    K = min(L, 64) it keeps max(0, K - P) loss tokens; an example with none left is left out (K tokens)."""
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(LLAMA2 / "tokenizer.model"))
    records = [json.loads(line) for line in gsm8k_200.read_text().splitlines()][:100]
    data = tmp_path / "g100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    seq = 64
    prompt = [1 + len(spm.encode(r["question"])) for r in records]
    total = [p + len(spm.encode(r["answer"])) + 1 for p, r in zip(prompt, records, strict=True)]
    kept_loss = [max(0, min(n, seq) - p) for p, n in zip(prompt, total, strict=True)]
    no_loss = [min(n, seq) for n, k in zip(total, kept_loss, strict=True) if k == 0]
    assert len(no_loss) > 10  # guard: many prompts really are longer than --seq-len here

    code, out, _ = cli(["pack", str(data), "-t", str(LLAMA2), "--prompt", "question", "--completion",
                       "answer", "--seq-len", str(seq), "--overflow", "truncate", "--json",
                       "--out", str(tmp_path / "rows.jsonl")])
    assert code == 0
    acc = json.loads(out)["accounting"]
    assert acc["examples"] == {"in": 100, "out": 100 - len(no_loss), "empty": 0, "dropped_too_long": 0,
                               "no_loss_token": len(no_loss)}
    assert acc["tokens"] == {"in": sum(total), "out": sum(min(n, seq) for n in total) - sum(no_loss),
                             "truncated": sum(max(0, n - seq) for n in total), "dropped_too_long": 0,
                             "no_loss_token": sum(no_loss)}
    loss_in = sum(n - p for p, n in zip(prompt, total, strict=True))
    assert acc["loss_tokens"] == {"in": loss_in, "out": sum(kept_loss), "truncated": loss_in - sum(kept_loss),
                                  "dropped_too_long": 0, "split_first_label_masked": 0}
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert all(any(t != -100 for t in r["labels"][1:]) for r in rows)  # no row that trains nothing

    code, out, _ = cli(["pack", str(data), "-t", str(LLAMA2), "--prompt", "question", "--completion",
                       "answer", "--seq-len", str(seq), "--overflow", "truncate",
                       "--out", str(tmp_path / "rows.jsonl"), "--force"])  # the file exists: --force replaces it
    assert code == 0
    assert f"{loss_in:,}" in out and f"{sum(kept_loss):,}" in out and f"{len(no_loss)} no loss token left" in out
    assert "special tokens: EOS </s> appended (from SentencePiece model); BOS <s>" in out


def test_pack_json_names_the_special_tokens_rule(gsm8k_200: Path, tmp_path: Path, cli) -> None:
    code, out, _ = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                       "--completion", "answer", "--seq-len", "1024", "--out", str(tmp_path / "r.jsonl"),
                       "--eos", "<|endoftext|>", "--json"])
    assert code == 0
    d = json.loads(out)
    assert d["special_tokens"] == {"source": "--eos", "eos": "<|endoftext|>", "eos_id": 0, "bos": None,
                                   "candidates": []}
    # one EOS (id 0, the raw tokenizers library's id of <|endoftext|>) more per example than without --eos
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sum(r["input_ids"].count(0) for r in rows) == 200


@pytest.mark.parametrize("target", ["/proc/memfit-rows.jsonl", "/sys/memfit-rows.jsonl",
                                    "/sys/kernel/memfit-rows.parquet", "DIR", "DIR/missing/rows.jsonl"])
def test_pack_out_that_cannot_be_written_is_one_line(gsm8k_200: Path, tmp_path: Path, cli, target: str) -> None:
    if target.startswith(("/proc", "/sys")) and not Path(target).parent.is_dir():
        pytest.skip("no /proc or /sys here")
    existing = tmp_path / "rows.jsonl"
    existing.mkdir()
    out_path = target.replace("DIR", str(existing))
    code, out, err = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                         "--completion", "answer", "--out", out_path])
    assert code == 1 and out == ""
    assert err.startswith("error:") and "--out" in err and len(err.strip().splitlines()) <= 2
    assert "Traceback" not in err and not Path(out_path).is_file()
