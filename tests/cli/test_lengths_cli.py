"""``memfit lengths`` end to end: JSON keys and p95 against the raw tokenizers library, the plot, broken lines
counted, the activation rows of --model, and bad input or flags as one red line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
QWEN3 = SHARED / "tokenizers" / "qwen3"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"


Cli = Callable[[list[str]], tuple[int, str, str]]  # the `cli` fixture (tests/cli/conftest.py)


def _raw_qwen3():  # type: ignore[no-untyped-def]
    """Qwen3's tokenizer.json in the raw tokenizers library: an oracle independent of transformers and memfit."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(QWEN3 / "tokenizer.json"))


def test_cli_json_p95_and_plot(tmp_path: Path, cli: Cli) -> None:
    """The first 300 GSM8K test pairs; lengths by the raw tokenizers library: question + answer + <|im_end|>."""
    data = tmp_path / "gsm8k300.jsonl"
    lines = GSM8K_TEST.read_text().splitlines()[:300]
    data.write_text("\n".join(lines) + "\n")
    raw = _raw_qwen3()
    totals = [len(raw.encode(r["question"]).ids) + len(raw.encode(r["answer"], add_special_tokens=False).ids) + 1
              for r in map(json.loads, lines)]
    png = tmp_path / "h.png"
    rc, out, _ = cli(["lengths", str(data), "--tokenizer", str(QWEN3), "--prompt", "question",
                     "--completion", "answer", "--batch", "4", "--seq-len", "256", "--plot", str(png), "--json"])
    assert rc == 0
    d = json.loads(out)
    assert d["count"] == 300
    assert d["percentiles"]["p95"] == int(np.percentile(totals, 95, method="inverted_cdf"))
    assert d["max"] == max(totals) and d["over_seq_len"] == sum(1 for t in totals if t > 256)
    required = {"count": int, "min": int, "mean": float, "max": int, "percentiles": dict,
                "recommended_seq_len": int, "over_seq_len": int, "truncated_tokens": int, "loss_tokens": int,
                "padding_waste": dict, "skipped": list}
    for key, typ in required.items():
        assert isinstance(d[key], typ), key
    assert set(d["percentiles"]) == {"p50", "p90", "p95", "p99"}
    assert set(d["padding_waste"]) == {"random", "grouped", "packed"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_counts_broken_lines_and_shows_activations(tmp_path: Path, cli: Cli) -> None:
    """39 texts "word " * k (k = 1..39) and a broken line 6; Qwen3, --seq-len 64, --batch 4, --model.

    The lengths, by the raw tokenizers library: "word " * k is k + 1 tokens (k words and the trailing space),
    + one <|im_end|>: k + 2, i.e. 3..41, 858 tokens. Each strategy's activation row is the estimate at its rows
    per step and padded length, worked here without memfit: random and grouped batches hold --batch 4 examples
    and their longest micro-batch is padded to the longest example, 41; packed rows reach the lower bound
    ceil(858 / 64) = 14, so ceil(4 * 14 / 39) = 2 rows of 64 carry 4 examples per step on average. (The
    estimate's bytes for a given batch and length are pinned by tests/estimate; this checks which batch and
    length `lengths` asks it for.)
    """
    from memfit.estimate import RunSpec, estimate_memory, resolve_model

    p = tmp_path / "d.jsonl"
    texts = ["word " * k for k in range(1, 40)]
    good = [json.dumps({"text": t}) for t in texts]
    p.write_text("\n".join(good[:5] + ['{"text": "broken'] + good[5:]) + "\n")
    raw = _raw_qwen3()
    lengths = [len(raw.encode(t).ids) + 1 for t in texts]
    assert lengths == list(range(3, 42)) and sum(lengths) == 858 and math.ceil(858 / 64) == 14

    rc, out, _ = cli(["lengths", str(p), "-t", str(QWEN3), "--text", "text", "--seq-len", "64", "--batch", "4",
                     "--model", "Qwen2.5-0.5B", "--json"])
    assert rc == 0
    d = json.loads(out)
    assert d["count"] == 39 and d["skipped"][0]["line"] == 6 and "malformed JSON" in d["skipped"][0]["reason"]
    assert d["loss_tokens"] is None  # text mode: every token carries loss
    rows = {a["strategy"]: a for a in d["activations"]}
    shape = resolve_model("Qwen2.5-0.5B")
    for strategy, batch, length in (("random", 4, 41), ("grouped", 4, 41), ("packed", 2, 64)):
        row = rows[strategy]
        assert (row["batch"], row["peak_len"]) == (batch, length), strategy
        want = estimate_memory(shape, RunSpec(batch=batch, seq=length))
        assert (row["activation_bytes_peak"], row["peak_bytes"]) == (want.activation_bytes, want.peak_bytes)
    assert rows["packed"]["mean_len"] == 64  # every packed row is processed at --seq-len
    assert rows["packed"]["activation_bytes_mean"] == rows["packed"]["activation_bytes_peak"]


@pytest.mark.parametrize("content, flags, message", [
    ('{"question": "q", "answer": "a"}\n', ["--text", "prompt"], "no field 'prompt'; its fields are: question, answer"),
    ("", ["--text", "text"], "is empty"),
])
def test_cli_bad_input_is_one_red_line(tmp_path: Path, cli: Cli, content: str,
                                       flags: list[str], message: str) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(content)
    rc, out, err = cli(["lengths", str(p), "--tokenizer", str(QWEN3), *flags])
    assert rc == 1 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("flags, message", [
    (["--seq-len", "1"], "--seq-len must be an integer of at least 2 tokens, got 1"),  # as memfit pack
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    (["--plot", "{tmp}/missing/h.png"], "the folder {tmp}/missing does not exist"),
    (["--plot", "{tmp}/h.txt"], "matplotlib cannot write .txt files; end the name in .png"),
    (["--plot", "{tmp}"], "is a directory: give a file name such as {tmp}/plot.png"),
])
def test_cli_bad_flags_are_one_red_line(tmp_path: Path, cli: Cli, flags: list[str],
                                        message: str) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "one two", "answer": "three"}\n')
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    rc, out, err = cli(["lengths", str(p), "--tokenizer", str(QWEN3), "--prompt", "question", "--completion",
                       "answer", *flags])
    assert rc == 1 and out == "" and "Traceback" not in err
    assert message.replace("{tmp}", str(tmp_path)) in err.replace("\n", " ")


def test_cli_names_the_special_tokens_rule(tmp_path: Path, cli: Cli) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "one two", "answer": "three"}\n')
    base = ["lengths", str(p), "--tokenizer", str(QWEN3 / "tokenizer.json"), "--prompt", "question", "--completion",
            "answer"]
    rc, out, _ = cli(base)
    assert rc == 0 and "special tokens: EOS <|im_end|> appended (from tokenizer_config.json); no BOS" in out
    rc, out, _ = cli([*base, "--no-eos", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["special_tokens"]["source"] == "--no-eos"
    rc, out, err = cli([*base, "--no-eos", "--eos", "<|endoftext|>"])
    assert rc == 1 and "contradict" in err
