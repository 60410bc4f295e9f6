"""Fixtures shared by the data tests: the Qwen3 tokenizer and GSM8K test tokenised with it."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
QWEN3 = SHARED / "tokenizers" / "qwen3"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="session")
def qwen3() -> object:
    pytest.importorskip("transformers")
    from memfit.data.tokenizer import load_tokenizer

    return load_tokenizer(QWEN3)


@pytest.fixture(scope="session")
def gsm8k_test_examples(qwen3: object) -> list:  # type: ignore[type-arg]
    """GSM8K test (1,319 records), question as the prompt, answer as the completion, Qwen3."""
    from memfit.data.formats import load_records
    from memfit.data.tokenize import tokenize_records

    recs = load_records(GSM8K_TEST, prompt="question", completion="answer").records
    return tokenize_records(qwen3, recs, prompt="question", completion="answer", progress=False)
