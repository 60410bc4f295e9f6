"""Padding waste: the docstring's example by hand, the length grouping against transformers' sampler, and the
three strategies on GSM8K against token counts from the raw tokenizers library."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memfit.data.lengths import length_report
from memfit.data.padding import batch_padding, length_grouped_order, padding_report

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"


def test_padding_worked_examples() -> None:
    # docstring example: batches (10, 2) and (7, 7) -> 2*10 + 2*7 = 34 processed, 26 real
    b = batch_padding([10, 2, 7, 7], 2)
    assert (b.processed_tokens, b.real_tokens, b.peak_len, b.micro_batches) == (34, 26, 10, 2)
    assert b.waste == pytest.approx(8 / 34)
    # a ragged last batch is padded to its own longest member only: (5, 1, 3) + (4,) -> 15 + 4
    assert batch_padding([5, 1, 3, 4], 3).processed_tokens == 19
    # packing [10, 2, 7, 7] into rows of 16: rows (10, 2) and (7, 7) -> 32 slots for 26 real tokens, and
    # ceil(2 * 2 / 4) = 1 row per micro-batch carries 2 examples on average
    r = padding_report([10, 2, 7, 7], batch=2, seq_len=16)
    assert r.packed.processed_tokens == 32 and r.packed.waste == pytest.approx(6 / 32)
    assert (r.packed.batch, r.packed.micro_batches, r.packed.peak_len) == (1, 2, 16)
    # lengths over seq_len are capped before padding: 40 -> 16
    assert padding_report([40, 1], batch=2, seq_len=16).random.processed_tokens == 32


@pytest.mark.parametrize("n, batch", [(30, 4), (7473, 8), (1001, 3)])
def test_grouping_matches_transformers_length_grouped_sampler(n: int, batch: int) -> None:
    torch = pytest.importorskip("torch")
    from transformers.trainer_pt_utils import get_length_grouped_indices

    lengths = np.random.default_rng(n).integers(1, 400, size=n).tolist()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(7)).tolist()
    ref = get_length_grouped_indices(lengths, batch, generator=torch.Generator().manual_seed(7))
    assert length_grouped_order(lengths, batch, perm) == list(ref)


def test_padding_order_packed_grouped_random_on_gsm8k(gsm8k_test_examples: list) -> None:  # type: ignore[type-arg]
    """GSM8K test (1,319 examples), Qwen3, --seq-len 2048, --batch 8. The tokens, counted by the raw tokenizers
    library one example at a time: question (Qwen3 adds no special token) + answer + one <|im_end|> (the EOS of
    its tokenizer_config.json) = 245,944. Packed rows reach the lower bound ceil(245,944 / 2048) = 121, i.e.
    121 * 2048 = 247,808 slots: waste 1 - 245,944 / 247,808 = 0.752%; ceil(8 * 121 / 1319) = 1 row per step
    carries 8 examples on average. Random batches: ceil(1319 / 8) = 165 micro-batches, the longest padded to
    the longest example."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(SHARED / "tokenizers" / "qwen3" / "tokenizer.json"))
    records = [json.loads(line) for line in (SHARED / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()]
    lengths = [len(raw.encode(r["question"]).ids) + len(raw.encode(r["answer"], add_special_tokens=False).ids) + 1
               for r in records]
    total = sum(lengths)
    assert total == 245_944 and math.ceil(total / 2048) == 121

    pad = length_report([len(e) for e in gsm8k_test_examples], seq_len=2048, batch=8).padding
    assert pad.random.real_tokens == pad.grouped.real_tokens == pad.packed.real_tokens == 245_944
    assert pad.packed.processed_tokens == 121 * 2048
    assert pad.packed.waste == pytest.approx(1 - 245_944 / 247_808)
    assert (pad.packed.batch, pad.packed.micro_batches) == (1, 121)
    assert pad.random.micro_batches == 165 and pad.random.peak_len == max(lengths)
    assert pad.packed.waste < pad.grouped.waste < pad.random.waste
