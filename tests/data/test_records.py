"""The record schema: field specs, their inference, chats in both layouts, and why a record is unusable."""

from __future__ import annotations

import pytest

from memfit.data.records import FieldSpec, check_record, infer_fields, normalise_messages, tokenized_hint
from memfit.errors import MemfitError

OPENAI = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
SHAREGPT = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]


def test_chats_in_both_layouts_become_openai_dicts() -> None:
    assert normalise_messages(OPENAI) == normalise_messages(SHAREGPT) == OPENAI
    # ShareGPT's other speaker names, and case: "system", "bing" (assistant), "observation" (tool)
    chat = [{"from": "System", "value": "s"}, {"from": "human", "value": "q"}, {"from": "bing", "value": "a"},
            {"from": "observation", "value": "o"}]
    assert [m["role"] for m in normalise_messages(chat)] == ["system", "user", "assistant", "tool"]


@pytest.mark.parametrize("value, reason", [
    ([], "not a non-empty list"),
    ("hi", "not a non-empty list"),
    ([3], "message 0 is not an object"),
    ([{"speaker": "user", "text": "hi"}], "neither role/content nor from/value"),
    ([{"role": "wizard", "content": "x"}], "unknown role 'wizard'"),
    ([{"role": "user", "content": ["a"]}], "message 0 has no text content"),
    ([{"role": "user", "content": "only a question"}], "no assistant turn"),
])
def test_what_is_not_a_chat_says_why(value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        normalise_messages(value)


def test_field_spec_inference_and_conflicts() -> None:
    assert infer_fields(["id", "conversations"]) == FieldSpec(messages="conversations")
    assert infer_fields(["messages", "conversations"]) == FieldSpec(messages="messages")  # messages first
    assert infer_fields(["completion", "prompt", "text"]) == FieldSpec(prompt="prompt", completion="completion")
    assert infer_fields(["text", "meta"]) == FieldSpec(text="text")
    assert FieldSpec().mode == "none" and FieldSpec(text="t").names == ("t",)
    with pytest.raises(MemfitError, match="--text FIELD"):
        infer_fields(["question", "answer"])
    with pytest.raises(MemfitError, match="go together"):
        FieldSpec(prompt="q")
    with pytest.raises(MemfitError, match="not several"):
        FieldSpec(text="t", messages="m")


def test_token_id_records_get_a_hint_instead_of_a_guess() -> None:
    with pytest.raises(MemfitError, match="looks like the output of memfit pack"):
        infer_fields(["input_ids", "labels", "seq_lens"])
    with pytest.raises(MemfitError, match="already token ids"):
        infer_fields(["input_ids", "labels"])
    assert tokenized_hint(["question", "answer"]) == ""


def test_check_record_reasons() -> None:
    pc = FieldSpec(prompt="q", completion="a")
    assert check_record({"q": "hi", "a": "yo"}, pc) is None
    assert check_record({"q": "hi"}, pc) == "no field 'a' (this record has: q)"
    assert check_record({"q": "hi", "a": 3}, pc) == "field 'a' is int, not text"
    chat = FieldSpec(messages="m")
    assert check_record({"m": SHAREGPT}, chat) is None
    assert check_record({"m": OPENAI[:1]}, chat) == "field 'm': chat has no assistant turn"
