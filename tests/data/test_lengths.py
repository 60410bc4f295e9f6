"""memfit lengths on real data: percentiles against numpy, padding waste by hand and against transformers'
group_by_length, the three strategies' order on GSM8K, and the CLI (exit codes, p95, bad input)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memfit.data.lengths import length_report, nearest_rank_percentile
from memfit.data.padding import batch_padding, length_grouped_order, padding_report
from memfit.data.tokenizer import load_tokenizer

pytest.importorskip("transformers")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
QWEN3 = SHARED / "tokenizers" / "qwen3"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def qwen3() -> object:
    return load_tokenizer(QWEN3)


N_INDEPENDENT = 400  # examples re-tokenised one at a time as the oracle


@pytest.fixture(scope="module")
def independent(qwen3: object) -> tuple[list[int], list[int]]:
    return _independent_lengths(qwen3, GSM8K_TEST, limit=N_INDEPENDENT)


@pytest.fixture(scope="module")
def examples(qwen3: object) -> list:  # type: ignore[type-arg]
    from memfit.data.load import load_records
    from memfit.data.tokenize import tokenize_records

    recs = load_records(GSM8K_TEST, prompt="question", completion="answer").records
    return tokenize_records(qwen3, recs, prompt="question", completion="answer", progress=False)


@pytest.fixture(scope="module")
def gsm8k(examples: list):  # type: ignore[no-untyped-def,type-arg]
    return length_report([len(e) for e in examples], seq_len=2048, batch=8, examples=examples,
                         mode="prompt_completion")


def _independent_lengths(tok: object, path: Path, limit: int | None = None) -> tuple[list[int], list[int]]:
    """Prompt and total lengths, one example at a time: prompt with special tokens, completion without, + EOS."""
    rows = [json.loads(line) for line in path.read_text().splitlines()][:limit]
    prompts = [len(tok(r["question"]).input_ids) for r in rows]  # type: ignore[operator]
    totals = [p + len(tok(r["answer"], add_special_tokens=False).input_ids) + 1  # type: ignore[operator]
              for p, r in zip(prompts, rows, strict=True)]
    return prompts, totals


def test_gsm8k_statistics_against_numpy(gsm8k, independent: tuple[list[int], list[int]]) -> None:  # type: ignore[no-untyped-def]
    r = gsm8k
    lens = r.lengths
    assert r.count == 1319 == len(lens) and not r.skipped  # README: 1,319 test pairs
    assert lens[:N_INDEPENDENT] == independent[1]  # the lengths are the tokenizer's, one example at a time
    srt = sorted(lens)
    for p in (50, 90, 95, 99):
        # numpy's nearest-rank method, and the rank worked by hand: x_(ceil(p n / 100))
        assert r.percentiles[f"p{p}"] == int(np.percentile(lens, p, method="inverted_cdf"))
        assert r.percentiles[f"p{p}"] == srt[math.ceil(p * len(srt) / 100) - 1]
    assert (r.min, r.max, r.total_tokens) == (min(lens), max(lens), sum(lens))
    assert r.mean == pytest.approx(sum(lens) / len(lens))
    assert r.recommended_seq_len % 64 == 0 and r.recommended_seq_len - 64 < r.p95 <= r.recommended_seq_len
    assert r.recommended_over == sum(1 for n in lens if n > r.recommended_seq_len)
    assert 0 < r.recommended_truncated_share <= 0.05  # p95 leaves at most 5% longer
    assert r.over_seq_len == 0 and r.truncated_tokens == 0  # GSM8K is short: nothing over 2048


def test_truncation_and_loss_tokens_cut_by_hand(examples: list, independent: tuple[list[int], list[int]]) -> None:  # type: ignore[type-arg]
    prompts, totals = independent
    seq = 200
    sample = examples[:N_INDEPENDENT]
    r = length_report([len(e) for e in sample], seq_len=seq, batch=4, examples=sample, mode="prompt_completion")
    assert r.loss_tokens == sum(t - p for p, t in zip(prompts, totals, strict=True))
    assert r.over_seq_len == sum(1 for t in totals if t > seq) > 0
    assert r.truncated_tokens == sum(t - seq for t in totals if t > seq)
    # loss tokens past the cut: the completion tokens at positions >= seq
    assert r.loss_tokens_truncated == sum(t - max(seq, p) for p, t in zip(prompts, totals, strict=True) if t > seq)


def test_padding_order_packed_grouped_random_on_gsm8k(gsm8k) -> None:  # type: ignore[no-untyped-def]
    pad = gsm8k.padding
    assert pad.packed.waste < pad.grouped.waste < pad.random.waste
    total = gsm8k.total_tokens
    for s in pad.strategies():
        assert s.real_tokens == total
    rows = pad.packed.processed_tokens // 2048
    assert pad.packed.processed_tokens == rows * 2048 and rows >= math.ceil(total / 2048)
    assert pad.packed.waste == pytest.approx(1 - total / (rows * 2048))
    assert pad.packed.batch == math.ceil(8 * rows / 1319)  # rows carrying 8 examples per step on average
    assert pad.random.micro_batches == math.ceil(1319 / 8)
    assert pad.random.peak_len == gsm8k.max  # the batch holding the longest example


def test_padding_worked_examples() -> None:
    # docstring example: batches (10, 2) and (7, 7) -> 2*10 + 2*7 = 34 processed, 26 real
    b = batch_padding([10, 2, 7, 7], 2)
    assert (b.processed_tokens, b.real_tokens, b.peak_len, b.micro_batches) == (34, 26, 10, 2)
    assert b.waste == pytest.approx(8 / 34)
    # a ragged last batch is padded to its own longest member only: (5, 1, 3) + (4,) -> 15 + 4
    assert batch_padding([5, 1, 3, 4], 3).processed_tokens == 19
    # packing [10, 2, 7, 7] into rows of 16: two rows -> 32 slots, capped lengths keep 26 real tokens
    r = padding_report([10, 2, 7, 7], batch=2, seq_len=16)
    assert r.packed.processed_tokens == 32 and r.packed.waste == pytest.approx(6 / 32)
    # lengths over seq_len are capped before padding: 40 -> 16
    assert padding_report([40, 1], batch=2, seq_len=16).random.processed_tokens == 32


def test_recommended_seq_len_worked_examples() -> None:
    r = length_report(list(range(1, 1001)), seq_len=512, batch=4)
    assert r.p95 == 950 and r.recommended_seq_len == 960 and r.recommended_over == 40
    assert r.recommended_truncated_tokens == sum(range(1, 41))  # 961..1000 lose 1..40 tokens
    assert r.over_seq_len == 488 and r.truncated_tokens == sum(range(1, 489))
    r = length_report(list(range(1, 101)), seq_len=64, batch=4)
    assert r.p95 == 95 and r.recommended_seq_len == 128 and r.recommended_over == 0
    assert nearest_rank_percentile(np.array([7]), 99) == 7


@pytest.mark.parametrize("n, batch", [(30, 4), (7473, 8), (1001, 3)])
def test_grouping_matches_transformers_length_grouped_sampler(n: int, batch: int) -> None:
    torch = pytest.importorskip("torch")
    from transformers.trainer_pt_utils import get_length_grouped_indices

    lengths = np.random.default_rng(n).integers(1, 400, size=n).tolist()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(7)).tolist()
    ref = get_length_grouped_indices(lengths, batch, generator=torch.Generator().manual_seed(7))
    assert length_grouped_order(lengths, batch, perm) == list(ref)


# --------------------------------------------------------------------------------------------------- CLI


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from memfit.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_p95_and_plot(tmp_path: Path, independent: tuple[list[int], list[int]],
                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "gsm8k300.jsonl"
    data.write_text("\n".join(GSM8K_TEST.read_text().splitlines()[:300]) + "\n")
    totals = independent[1][:300]
    png = tmp_path / "h.png"
    rc, out, _ = _run(["lengths", str(data), "--tokenizer", str(QWEN3), "--prompt", "question",
                       "--completion", "answer", "--batch", "4", "--seq-len", "256", "--plot", str(png), "--json"],
                      capsys)
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


def test_cli_counts_broken_lines_and_shows_activations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("memfit.estimate.budget")
    from memfit.estimate import RunSpec, estimate_memory, resolve_model

    p = tmp_path / "d.jsonl"
    good = [json.dumps({"text": "word " * k}) for k in range(1, 40)]
    p.write_text("\n".join(good[:5] + ['{"text": "broken'] + good[5:]) + "\n")
    rc, out, _ = _run(["lengths", str(p), "-t", str(QWEN3), "--text", "text", "--seq-len", "64", "--batch", "4",
                       "--model", "Qwen2.5-0.5B", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    assert d["count"] == 39 and d["skipped"][0]["line"] == 6 and "malformed JSON" in d["skipped"][0]["reason"]
    assert d["loss_tokens"] is None  # text mode: every token carries loss
    packed = next(a for a in d["activations"] if a["strategy"] == "packed")
    est = estimate_memory(resolve_model("Qwen2.5-0.5B"), RunSpec(batch=packed["batch"], seq=64))
    assert packed["activation_bytes_peak"] == est.activation_bytes and packed["peak_len"] == 64


@pytest.mark.parametrize("content, flags, message", [
    ('{"question": "q", "answer": "a"}\n', ["--text", "prompt"], "no field 'prompt'; its fields are: question, answer"),
    ("", ["--text", "text"], "is empty"),
])
def test_cli_bad_input_is_one_red_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                       flags: list[str], message: str) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(content)
    rc, out, err = _run(["lengths", str(p), "--tokenizer", str(QWEN3), *flags], capsys)
    assert rc == 1 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_empty_examples_are_counted_not_measured(tmp_path: Path) -> None:
    from memfit.data.lengths import analyse_lengths
    from memfit.errors import MemfitError

    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "one two"}\n{"text": ""}\n{"text": "three"}\n')
    neox = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"  # no BOS/EOS: "" has no tokens
    r = analyse_lengths(p, neox, text="text", seq_len=16, batch=2)
    assert r.count == 2 and [(s.line, s.reason) for s in r.skipped] == [(2, "tokenises to no tokens")]
    with pytest.raises(MemfitError, match="--seq-len must be an integer of at least 2 tokens, got 0"):
        analyse_lengths(p, neox, text="text", seq_len=0)


def test_people_view_renders_the_key_figures() -> None:
    from rich.console import Console

    from memfit.data.load import Skipped
    from memfit.report.lengths import lengths_renderable

    r = length_report(list(range(1, 1001)), seq_len=512, batch=4, source="x.jsonl", tokenizer="t",
                      skipped=[Skipped(line=7, reason="malformed JSON")])
    console = Console(record=True, width=160)
    console.print(lengths_renderable(r))
    text = console.export_text()
    assert "950" in text and "train at --seq-len 960" in text and "line 7: malformed JSON" in text
    assert f"{r.padding.random.waste:.1%}" in text and "488 (48.80%)" in text


@pytest.mark.parametrize("flags, message", [
    (["--seq-len", "1"], "--seq-len must be an integer of at least 2 tokens, got 1"),  # as memfit pack
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    (["--plot", "{tmp}/missing/h.png"], "the folder {tmp}/missing does not exist"),
    (["--plot", "{tmp}/h.txt"], "matplotlib cannot write .txt files; end the name in .png"),
    (["--plot", "{tmp}"], "is a directory: name an image file"),
])
def test_cli_bad_flags_are_one_red_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                        message: str) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "one two", "answer": "three"}\n')
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    rc, out, err = _run(["lengths", str(p), "--tokenizer", str(QWEN3), "--prompt", "question", "--completion",
                         "answer", *flags], capsys)
    assert rc == 1 and out == "" and "Traceback" not in err
    assert message.replace("{tmp}", str(tmp_path)) in err.replace("\n", " ")


def test_cli_names_the_special_tokens_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "one two", "answer": "three"}\n')
    base = ["lengths", str(p), "--tokenizer", str(QWEN3 / "tokenizer.json"), "--prompt", "question", "--completion",
            "answer"]
    rc, out, _ = _run(base, capsys)
    assert rc == 0 and "special tokens: EOS <|im_end|> appended (from tokenizer_config.json); no BOS" in out
    rc, out, _ = _run([*base, "--no-eos", "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["special_tokens"]["source"] == "--no-eos"
    rc, out, err = _run([*base, "--no-eos", "--eos", "<|endoftext|>"], capsys)
    assert rc == 1 and "contradict" in err
