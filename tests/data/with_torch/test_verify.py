"""verify_packing passes a correct packing and fails the two classic mistakes, each named."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from memfit.data.pack import pack  # noqa: E402
from memfit.data.torch.verify import tiny_llama, verify_packing  # noqa: E402
from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.constants import IGNORE_INDEX  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
VOCAB = 400


def _examples(n: int = 24, seed: int = 3) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(3, 40))
        ids = rng.integers(0, VOCAB, length).tolist()
        k = length // 2  # the prompt: no loss
        out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * k + ids[k:]})
    return out


def _loss_tokens_by_hand(examples: list[dict[str, list[int]]]) -> int:
    # A causal LM alone trains on labels[1:] (the shift drops the first label).
    return sum(sum(1 for t in e["labels"][1:] if t != IGNORE_INDEX) for e in examples)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(VOCAB, attn_implementation="sdpa")


@pytest.mark.parametrize("form", ["position-ids", "block"])
def test_correct_packing_passes(model, form: str) -> None:
    ex = _examples()
    res = verify_packing(model, ex, 96, mask=form, batch_size=3)
    assert res.passed, res.failures
    assert res.examples == len(ex) and res.rows < len(ex)  # several examples per row really were packed
    assert res.max_abs_logit_diff < 1e-4
    assert res.loss_tokens_alone == res.loss_tokens_packed == _loss_tokens_by_hand(ex)
    assert res.loss_abs_diff < 1e-4
    assert res.to_dict()["pass"] is True


def test_eager_passes_too() -> None:
    res = verify_packing(tiny_llama(VOCAB, attn_implementation="eager"), _examples(12), 96)
    assert res.passed, res.failures
    assert res.attn_implementation == "eager"


def test_naive_concatenation_with_an_all_ones_mask_fails(model) -> None:
    ex = _examples()
    res = verify_packing(model, ex, 96, mask="naive", batch_size=3)
    assert not res.passed
    assert res.examples_with_logit_diff > 0 and res.max_abs_logit_diff > 1e-2
    assert any("attend across their boundaries" in f for f in res.failures)


def test_lost_prompt_labels_are_named_the_completion_only_loss_bug(model) -> None:
    ex = _examples()
    good = pack(ex, 96)
    # The classic bug: labels rebuilt from input_ids after concatenation, so the prompts' -100 are gone.
    bad = replace(good, rows=tuple(replace(r, labels=[IGNORE_INDEX, *r.input_ids[1:]]) for r in good.rows))
    res = verify_packing(model, ex, 96, packed=bad)
    assert not res.passed
    assert res.loss_tokens_alone == _loss_tokens_by_hand(ex)
    assert res.loss_tokens_packed == sum(r.n_tokens - 1 for r in good.rows)  # every token but each row's first
    assert any(f.startswith("completion-only-loss bug") and "full-sequence loss" in f for f in res.failures)
    assert res.max_abs_logit_diff < 1e-4  # the attention is fine: only the labels are wrong


def test_first_label_learnt_from_the_previous_example_fails(model) -> None:
    ex = [{"input_ids": e["input_ids"], "labels": list(e["input_ids"])} for e in _examples(10)]  # full loss
    good = pack(ex, 96)
    leaky_rows = []
    for r in good.rows:
        labels = list(r.labels)
        for a in r.cu_seqlens[1:-1]:
            labels[a] = r.input_ids[a]
        leaky_rows.append(replace(r, labels=labels))
    res = verify_packing(model, ex, 96, packed=replace(good, rows=tuple(leaky_rows)))
    assert not res.passed
    assert res.first_label_leaks == sum(len(r.example_ids) - 1 for r in good.rows) > 0
    assert any("predict their first token from the previous example" in f for f in res.failures)


def test_split_pieces_verify(model) -> None:
    ex = _examples(8)
    ex.append({"input_ids": list(range(1, 60)), "labels": [IGNORE_INDEX] * 10 + list(range(11, 60))})
    res = verify_packing(model, ex, 25, overflow="split")
    assert res.passed, res.failures
    assert res.examples == sum(-(-len(e["input_ids"]) // 25) for e in ex)  # e.g. 59 tokens -> 25 + 25 + 9
    assert res.examples > len(ex)


def test_limit_and_errors(model) -> None:
    res = verify_packing(model, _examples(), 96, limit=5)
    assert res.examples == 5
    with pytest.raises(MemfitError, match="--limit"):
        verify_packing(model, _examples(), 96, limit=0)
    with pytest.raises(MemfitError, match=re.escape("unknown --mask 'flex': choose one of position-ids | block")):
        verify_packing(model, _examples(), 96, mask="flex")


def test_gsm8k_with_a_real_tokenizer_passes() -> None:
    from memfit.data.formats import load_records
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json")
    recs = load_records(SHARED / "data" / "gsm8k" / "train.jsonl", prompt="question", completion="answer")
    examples = tokenize_records(tok, recs.records[:12], prompt="question", completion="answer", progress=False)
    model = tiny_llama(len(tok), max_positions=1024)
    res = verify_packing(model, examples, 1024)
    assert res.passed, res.failures
    assert res.rows < res.examples == 12
    # Loss tokens = completion (+ EOS when the tokenizer has one) per example, counted with the tokenizer directly.
    eos = 1 if tok.eos_token_id is not None else 0
    want = sum(len(tok(r["answer"], add_special_tokens=False)["input_ids"]) + eos for r in recs.records[:12])
    assert res.loss_tokens_alone == res.loss_tokens_packed == want
