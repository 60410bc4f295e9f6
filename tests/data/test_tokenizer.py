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


def test_qwen3_directory_has_its_chat_template_and_adds_no_bos() -> None:
    """Qwen3 puts no BOS before a text: the ids with special tokens are the raw tokenizers library's encoding
    of the text alone, and the first token is the sentence's first word."""
    from tokenizers import Tokenizer

    tok = load_tokenizer(TOK / "qwen3")
    assert len(tok) == 151669  # README
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    ids = tok(SENTENCE).input_ids
    raw = Tokenizer.from_file(str(TOK / "qwen3" / "tokenizer.json"))
    assert ids == raw.encode(SENTENCE, add_special_tokens=False).ids
    assert tok.convert_ids_to_tokens(ids[0]) == "The" and tok.bos_token_id is None


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


# --------------------------------------------------------------------------------------------------------------
# Special tokens: one rule for a directory and the tokenizer.json in it

GSM8K_TRAIN = SHARED / "data" / "gsm8k" / "train.jsonl"


def _first_gsm8k(n: int) -> list[dict[str, str]]:
    import json

    return [json.loads(line) for line in GSM8K_TRAIN.read_text().splitlines()[:n]]


def test_qwen3_bare_tokenizer_json_counts_like_its_directory() -> None:
    """Qwen3's first 50 GSM8K train examples come to 9,450 tokens from the directory, and the same from its
    tokenizer.json (read without the settings beside it, no <|im_end|> would be appended: 9,400). The oracle is
    transformers' own AutoTokenizer on the directory, used directly: question with special tokens + answer
    without + its eos_token, one at a time."""
    from transformers import AutoTokenizer

    from memfit.data.lengths import analyse_lengths

    records = _first_gsm8k(50)
    hf = AutoTokenizer.from_pretrained(str(TOK / "qwen3"), local_files_only=True)
    assert hf.eos_token == "<|im_end|>"  # tokenizer_config.json
    want = sum(len(hf(r["question"]).input_ids) + len(hf(r["answer"], add_special_tokens=False).input_ids) + 1
               for r in records)
    assert want == 9450
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "g50.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        for path in (TOK / "qwen3", TOK / "qwen3" / "tokenizer.json"):
            report = analyse_lengths(data, path, prompt="question", completion="answer", seq_len=512)
            assert report.total_tokens == want, path
            assert report.special_tokens is not None
            assert (report.special_tokens.source, report.special_tokens.eos) == ("tokenizer_config.json",
                                                                                  "<|im_end|>")
            assert report.to_dict()["special_tokens"]["eos_id"] == hf.eos_token_id
            assert report.special_tokens.describe() == "EOS <|im_end|> appended (from tokenizer_config.json); no BOS"


def test_gpt_neox_bare_json_and_its_directory_name_no_eos_and_eos_flag_appends() -> None:
    """GPT-NeoX ships only a tokenizer.json: no config, a ByteLevel post-processor (adds nothing), so no EOS is
    known: nothing is appended, the same for the file and its directory, and the report names the candidates.
    --eos '<|endoftext|>' appends the id the raw tokenizers library gives that token (0)."""
    from tokenizers import Tokenizer

    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import special_tokens

    raw = Tokenizer.from_file(str(TOK / "gpt-neox-20b" / "tokenizer.json"))
    records = _first_gsm8k(5)
    for path in (TOK / "gpt-neox-20b", TOK / "gpt-neox-20b" / "tokenizer.json"):
        tok = load_tokenizer(path)
        rule = special_tokens(tok)
        assert (rule.source, rule.eos, rule.bos) == ("none", None, None)
        assert "<|endoftext|>" in rule.candidates and "pass --eos TOKEN" in rule.describe()
        ex = tokenize_records(tok, records, text="answer", progress=False)
        assert [e.input_ids for e in ex] == [raw.encode(r["answer"]).ids for r in records]
    tok = load_tokenizer(TOK / "gpt-neox-20b" / "tokenizer.json", eos="<|endoftext|>")
    assert special_tokens(tok).source == "--eos" and special_tokens(tok).eos_id == raw.token_to_id("<|endoftext|>")
    ex = tokenize_records(tok, records, text="answer", progress=False)
    assert [e.input_ids for e in ex] == [[*raw.encode(r["answer"]).ids, 0] for r in records]


def test_no_eos_and_bad_eos() -> None:
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import special_tokens

    tok = load_tokenizer(TOK / "qwen3", eos=False)
    assert special_tokens(tok).source == "--no-eos" and special_tokens(tok).eos is None
    ex = tokenize_records(tok, [{"q": "hi", "a": "there"}], prompt="q", completion="a", progress=False)
    assert ex[0].input_ids == tok("hi").input_ids + tok("there", add_special_tokens=False).input_ids
    with pytest.raises(MemfitError, match="--eos 'NOPE' is not a token"):
        load_tokenizer(TOK / "qwen3", eos="NOPE")


def test_post_processor_that_appends_eos_is_the_rule(tmp_path: Path) -> None:
    """A bare tokenizer.json whose TemplateProcessing ends every sequence with </s>: that is its EOS, added by the
    tokenizer itself, so a text example ends with exactly one </s> (not two). Built with the tokenizers library:
    vocabulary {<unk>: 0, </s>: 1, hello: 2, world: 3}, whitespace pre-tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import special_tokens

    raw = Tokenizer(models.WordLevel({"<unk>": 0, "</s>": 1, "hello": 2, "world": 3}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens(["</s>"])
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    raw.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    rule = special_tokens(tok)
    assert (rule.source, rule.eos, rule.eos_id, rule.bos) == ("post-processor", "</s>", 1, None)
    assert special_tokens(load_tokenizer(tmp_path)).to_dict() == rule.to_dict()  # the directory: the same rule
    ex = tokenize_records(tok, [{"t": "hello world"}], text="t", progress=False)
    assert ex[0].input_ids == [2, 3, 1]
