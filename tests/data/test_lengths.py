"""length_report and analyse_lengths on real data: percentiles against numpy and by hand, the lengths against
the tokenizer one example at a time, truncation and loss tokens cut worked by hand, empty examples counted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memfit.data.lengths import length_report, nearest_rank_percentile

pytest.importorskip("transformers")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"

N_INDEPENDENT = 400  # examples re-tokenised one at a time as the oracle


@pytest.fixture(scope="module")
def independent(qwen3: object) -> tuple[list[int], list[int]]:
    return _independent_lengths(qwen3, GSM8K_TEST, limit=N_INDEPENDENT)


@pytest.fixture(scope="module")
def gsm8k(gsm8k_test_examples: list):  # type: ignore[no-untyped-def,type-arg]
    return length_report([len(e) for e in gsm8k_test_examples], seq_len=2048, batch=8,
                         examples=gsm8k_test_examples, mode="prompt_completion")


def _independent_lengths(tok: object, path: Path, limit: int | None = None) -> tuple[list[int], list[int]]:
    """Prompt and total lengths, one example at a time: prompt with special tokens, completion without, + EOS."""
    rows = [json.loads(line) for line in path.read_text().splitlines()][:limit]
    prompts = [len(tok(r["question"]).input_ids) for r in rows]  # type: ignore[operator]
    totals = [p + len(tok(r["answer"], add_special_tokens=False).input_ids) + 1  # type: ignore[operator]
              for p, r in zip(prompts, rows, strict=True)]
    return prompts, totals


def test_gsm8k_statistics_against_numpy(gsm8k, independent: tuple[list[int], list[int]]) -> None:  # type: ignore[no-untyped-def]
    r = gsm8k
    lens = r.lengths.tolist()  # an int64 array: the report keeps nothing else of the data
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


def test_truncation_and_loss_tokens_cut_by_hand(gsm8k_test_examples: list,  # type: ignore[type-arg]
                                                independent: tuple[list[int], list[int]]) -> None:
    prompts, totals = independent
    seq = 200
    sample = gsm8k_test_examples[:N_INDEPENDENT]
    r = length_report([len(e) for e in sample], seq_len=seq, batch=4, examples=sample, mode="prompt_completion")
    assert r.loss_tokens == sum(t - p for p, t in zip(prompts, totals, strict=True))
    assert r.over_seq_len == sum(1 for t in totals if t > seq) > 0
    assert r.truncated_tokens == sum(t - seq for t in totals if t > seq)
    # loss tokens past the cut: the completion tokens at positions >= seq
    assert r.loss_tokens_truncated == sum(t - max(seq, p) for p, t in zip(prompts, totals, strict=True) if t > seq)


def test_recommended_seq_len_worked_examples() -> None:
    r = length_report(list(range(1, 1001)), seq_len=512, batch=4)
    assert r.p95 == 950 and r.recommended_seq_len == 960 and r.recommended_over == 40
    assert r.recommended_truncated_tokens == sum(range(1, 41))  # 961..1000 lose 1..40 tokens
    assert r.over_seq_len == 488 and r.truncated_tokens == sum(range(1, 489))
    r = length_report(list(range(1, 101)), seq_len=64, batch=4)
    assert r.p95 == 95 and r.recommended_seq_len == 128 and r.recommended_over == 0
    assert nearest_rank_percentile(np.array([7]), 99) == 7


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
