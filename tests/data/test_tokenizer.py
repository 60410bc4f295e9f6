"""load_tokenizer against independent tokenizers: the sentencepiece library and the raw tokenizers library."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.data.tokenizer import load_tokenizer, tokenizer_name
from memfit.errors import MemfitError

pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOK = SHARED / "tokenizers"
SENTENCE = "The quick brown fox jumps over 12,345 lazy dogs!\nNatalia sold clips to 48 of her friends."
LLAMA2_BOS = 1


@pytest.fixture(scope="module")
def spm() -> object:
    return sentencepiece.SentencePieceProcessor(model_file=str(TOK / "llama2" / "tokenizer.model"))


@pytest.mark.parametrize("path", [TOK / "llama2", TOK / "llama2" / "tokenizer.model"], ids=["dir", "model-file"])
def test_llama2_sentencepiece_matches_the_sentencepiece_library(path: Path, spm: object) -> None:
    tok = load_tokenizer(path)
    assert len(tok) == 32000  # README: 32,000 pieces (the trap builds 3)
    assert tok.bos_token_id == LLAMA2_BOS and tok.eos_token_id == 2
    ids = tok(SENTENCE).input_ids
    # Llama 2 training data: BOS + SentencePiece's own encoding
    assert ids == [LLAMA2_BOS, *spm.encode(SENTENCE)]  # type: ignore[attr-defined]
    assert tok.convert_ids_to_tokens(ids[1:4]) == ["▁The", "▁quick", "▁brown"]
    assert tok.decode(ids, skip_special_tokens=True) == SENTENCE
    assert tokenizer_name(tok) == "llama2"


def test_gpt_neox_tokenizer_json_matches_raw_tokenizers() -> None:
    from tokenizers import Tokenizer

    path = TOK / "gpt-neox-20b" / "tokenizer.json"
    tok = load_tokenizer(path)
    raw = Tokenizer.from_file(str(path))
    assert tok(SENTENCE).input_ids == raw.encode(SENTENCE).ids
    assert len(tok) == raw.get_vocab_size(with_added_tokens=True)


def test_qwen3_directory_has_its_chat_template() -> None:
    tok = load_tokenizer(TOK / "qwen3")
    assert len(tok) == 151669  # README
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok(SENTENCE).input_ids[0] != tok.bos_token_id or tok.bos_token_id is None  # Qwen adds no BOS


def test_bad_tokenizer_paths(tmp_path: Path) -> None:
    with pytest.raises(MemfitError, match="no tokenizer at"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(MemfitError, match="holds no tokenizer"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "x.model"
    bad.write_bytes(b"not a sentencepiece model")
    with pytest.raises(MemfitError, match="not a SentencePiece model"):
        load_tokenizer(bad)
    txt = tmp_path / "vocab.txt"
    txt.write_text("a\n")
    with pytest.raises(MemfitError, match="cannot tell what kind of tokenizer"):
        load_tokenizer(txt)
