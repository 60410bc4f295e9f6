"""tokenize_records: ids and labels against independent tokenisations (sentencepiece, one text at a time,
transformers' own assistant mask from a {% generation %} template, and the Qwen3 template worked by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.data.formats import load_records
from memfit.data.tokenize import TokenizedExample, tokenize_records
from memfit.data.tokenizer import load_tokenizer
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOK = SHARED / "tokenizers"
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"
CHAT = SHARED / "data" / "chat" / "conversations.json"

# A ChatML template that marks assistant output with {% generation %}, so that transformers itself
# computes the assistant mask (apply_chat_template(return_assistant_tokens_mask=True)): our oracle.
CHATML_GENERATION = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}{%- else %}{{ message['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def llama2() -> object:
    return load_tokenizer(TOK / "llama2")


@pytest.fixture(scope="module")
def qwen3() -> object:
    return load_tokenizer(TOK / "qwen3")


@pytest.fixture(scope="module")
def gsm8k() -> list[dict]:
    return load_records(GSM8K_TEST, prompt="question", completion="answer").records


@pytest.fixture(scope="module")
def chats() -> list[dict]:
    return load_records(CHAT, messages="conversations").records


def test_prompt_completion_matches_sentencepiece(llama2: object, gsm8k: list[dict]) -> None:
    spm = sentencepiece.SentencePieceProcessor(model_file=str(TOK / "llama2" / "tokenizer.model"))
    ex = tokenize_records(llama2, gsm8k, prompt="question", completion="answer", progress=False)
    assert len(ex) == len(gsm8k)
    for e, r in zip(ex[:200], gsm8k[:200], strict=True):
        p = [spm.bos_id(), *spm.encode(r["question"])]
        c = [*spm.encode(r["answer"]), spm.eos_id()]
        assert e.input_ids == p + c
        assert e.labels == [IGNORE_INDEX] * len(p) + c
        assert e.loss_tokens == len(c)
    assert all(len(e.input_ids) == len(e.labels) for e in ex)


def test_text_mode_labels_everything_and_appends_eos(llama2: object, gsm8k: list[dict]) -> None:
    ex = tokenize_records(llama2, gsm8k[:50], text="question", progress=False)
    for e, r in zip(ex, gsm8k[:50], strict=True):
        one = llama2(r["question"]).input_ids  # one at a time, special tokens included
        assert e.input_ids == [*one, llama2.eos_token_id]
        assert e.labels == e.input_ids and e.loss_tokens == len(e)
    neox = load_tokenizer(TOK / "gpt-neox-20b" / "tokenizer.json")  # no EOS configured: nothing appended
    assert neox.eos_token_id is None
    ex = tokenize_records(neox, gsm8k[:20], text="answer", progress=False)
    assert [e.input_ids for e in ex] == [neox(r["answer"]).input_ids for r in gsm8k[:20]]


def test_chat_labels_equal_transformers_assistant_mask(qwen3: object) -> None:
    tok = qwen3
    original = tok.chat_template
    tok.chat_template = CHATML_GENERATION
    try:
        _check_against_generation_mask(tok)
    finally:
        tok.chat_template = original


def _check_against_generation_mask(tok: object) -> None:
    convs = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"},
         {"role": "assistant", "content": "hello"},  # same text as the user turn: must match the reply
         {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4, which is\nfour."}],
        [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A model."}],
    ]
    ex = tokenize_records(tok, [{"m": c} for c in convs], messages="m", progress=False)
    for e, conv in zip(ex, convs, strict=True):
        ref = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert e.input_ids == list(ref["input_ids"])
        mask = [label != IGNORE_INDEX for label in e.labels]
        assert mask == [bool(m) for m in ref["assistant_masks"]]
        assert sum(mask) > 0


def _qwen3_assistant_spans(conv: list[dict]) -> list[str]:
    """The assistant output of each turn as the Qwen3 template renders it (tokenizer_config.json): turns
    after the last user message carry an (empty) think block; every turn ends with <|im_end|>."""
    last_user = max(i for i, m in enumerate(conv) if m["from"] == "human")
    out = []
    for i, m in enumerate(conv):
        if m["from"] == "gpt":
            think = "<think>\n\n</think>\n\n" if i > last_user else ""
            out.append(think + m["value"] + "<|im_end|>")
    return out


def test_chat_loss_tokens_on_assistant_turns_only_qwen3(qwen3: object, chats: list[dict]) -> None:
    """Per chat, the loss tokens are the assistant spans of the Qwen3 template worked by hand, tokenised by
    transformers; over all 500 chats, their total is the same spans counted by the raw tokenizers library."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(TOK / "qwen3" / "tokenizer.json"))
    ex = tokenize_records(qwen3, chats, messages="conversations", progress=False)
    assert len(ex) == 500
    total_raw = 0
    for e, r in zip(ex, chats, strict=True):
        spans = _qwen3_assistant_spans(r["conversations"])
        expected = sum(len(qwen3(s, add_special_tokens=False).input_ids) for s in spans)
        assert e.loss_tokens == expected
        total_raw += sum(len(raw.encode(s, add_special_tokens=False).ids) for s in spans)
        # the loss-bearing tokens decode to exactly the assistant spans, in order
        assert qwen3.decode([i for i, lab in zip(e.input_ids, e.labels, strict=True) if lab != IGNORE_INDEX]) \
            == "".join(spans)
        # and the ids are the template's own tokenisation
    first = chats[0]["conversations"]
    msgs = [{"role": "user" if m["from"] == "human" else "assistant", "content": m["value"]} for m in first]
    assert ex[0].input_ids == list(qwen3.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"])
    assert sum(e.loss_tokens for e in ex) == total_raw
    assert all(e.loss_tokens < len(e) for e in ex)  # user turns and headers never carry loss


def test_batched_equals_one_by_one(qwen3: object, gsm8k: list[dict]) -> None:
    batched = tokenize_records(qwen3, gsm8k[:300], prompt="question", completion="answer", progress=False)
    single = [tokenize_records(qwen3, [r], prompt="question", completion="answer", progress=False)[0]
              for r in gsm8k[:300]]
    assert batched == single


def test_chat_without_template_is_an_error(llama2: object) -> None:
    assert not llama2.chat_template
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    with pytest.raises(MemfitError, match="no chat template"):
        tokenize_records(llama2, [{"m": chat}], messages="m", progress=False)


def test_tokenized_example_is_frozen() -> None:
    e = TokenizedExample(input_ids=[1, 2, 3], labels=[-100, 2, 3])
    assert e.loss_tokens == 2 and len(e) == 3
    with pytest.raises(AttributeError):
        e.labels = []  # type: ignore[misc]
    assert json.loads(json.dumps(e.to_dict())) == {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}


def test_fields_inferred_when_none_named(qwen3: object, chats: list[dict]) -> None:
    named = tokenize_records(qwen3, chats[:20], messages="conversations", progress=False)
    assert tokenize_records(qwen3, chats[:20], progress=False) == named
    with pytest.raises(MemfitError, match="--prompt FIELD --completion FIELD"):
        tokenize_records(qwen3, [{"question": "q", "answer": "a"}], progress=False)


STRICT = ("{%- for m in messages %}{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('roles must alternate user/assistant') }}{%- endif %}"
          "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}")


def test_chats_the_template_rejects_are_named_or_counted(qwen3: object, tmp_path: Path) -> None:
    from memfit.data.lengths import analyse_lengths

    good = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]
    bad = [{"from": "gpt", "value": "I start"}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "ok"}]
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(json.dumps({"conversations": c}) for c in (good, bad, good)) + "\n")
    original = qwen3.chat_template
    qwen3.chat_template = STRICT
    try:
        with pytest.raises(MemfitError, match="rejects chat 1: roles must alternate"):
            tokenize_records(qwen3, [{"m": c} for c in (good, bad)], messages="m", progress=False)
        rejected: dict[int, str] = {}
        ex = tokenize_records(qwen3, [{"m": c} for c in (good, bad)], messages="m", progress=False,
                              rejected=rejected)
        assert list(rejected) == [1] and len(ex[1]) == 0 and len(ex[0]) > 0
        r = analyse_lengths(p, qwen3, messages="conversations", seq_len=64, batch=2)
        assert r.count == 2 and [s.line for s in r.skipped] == [2]
        assert "roles must alternate" in r.skipped[0].reason
    finally:
        qwen3.chat_template = original
