"""The tokenizer paths, fuzzed: what --tokenizer points at (missing, a folder of nothing, garbage
tokenizer.json / tokenizer_config.json / SentencePiece .model, a data file), and what gets tokenised (any
Unicode, empty strings, control characters, long runs, chats in both layouts with any roles). A bad tokenizer
is one MemfitError; every text gives the ids the raw tokenizers library gives, labels the same length, -100
exactly on the prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzzing import SHARED, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from memfit.errors import MemfitError

NEOX = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
QWEN3 = SHARED / "tokenizers" / "qwen3"
IGNORE = -100


@pytest.fixture(scope="module")
def neox() -> tuple[Any, Any]:
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    from memfit.data.tokenizer import load_tokenizer

    return load_tokenizer(NEOX), Tokenizer.from_file(str(NEOX))


@pytest.fixture(scope="module")
def qwen3() -> Any:
    pytest.importorskip("transformers")
    from memfit.data.tokenizer import load_tokenizer

    return load_tokenizer(QWEN3)


texts = st.one_of(st.text(max_size=60), st.sampled_from(["", " ", "\n\n", "\x00", "\u200b", "🙂" * 30, "a" * 500,
                                                         "<|endoftext|>", "  leading", "trailing  "]))


@settings(max_examples=examples(60))
@given(rows=st.lists(st.tuples(texts, texts), min_size=1, max_size=6))
def test_text_and_prompt_completion_ids_are_the_tokenizers_library_ids(neox: tuple[Any, Any],
                                                                      rows: list[tuple[str, str]]) -> None:
    """GPT-NeoX's bare tokenizer.json has no EOS rule (memfit appends none) and adds no special tokens, so the
    oracle is the raw library's encode of each string."""
    from memfit.data.tokenize import tokenize_records

    tok, raw = neox
    records = [{"p": p, "c": c} for p, c in rows]
    text_mode = tokenize_records(tok, records, text="p", progress=False)
    for ex, (p, _) in zip(text_mode, rows, strict=True):
        assert ex.input_ids == raw.encode(p).ids and ex.labels == ex.input_ids
    pc = tokenize_records(tok, records, prompt="p", completion="c", progress=False)
    for ex, (p, c) in zip(pc, rows, strict=True):
        n_p = len(raw.encode(p).ids)
        assert ex.input_ids == raw.encode(p).ids + raw.encode(c, add_special_tokens=False).ids
        assert ex.labels == [IGNORE] * n_p + ex.input_ids[n_p:]


roles = st.sampled_from(["user", "assistant", "system", "human", "gpt", "tool", "model"])
message = st.one_of(st.fixed_dictionaries({"role": roles, "content": texts}),
                    st.fixed_dictionaries({"from": roles, "value": texts}))


@settings(max_examples=examples(25))
@given(chats=st.lists(st.lists(message, min_size=1, max_size=5), min_size=1, max_size=4))
def test_chats_tokenise_with_labels_only_on_ids_or_are_rejected_by_name(qwen3: Any,
                                                                        chats: list[list[dict[str, str]]]) -> None:
    from memfit.data.records import normalise_messages
    from memfit.data.tokenize import tokenize_records

    usable = []
    for c in chats:
        try:
            normalise_messages(c)
            usable.append({"m": c})
        except ValueError:
            pass  # the reader skips such a record before tokenising (tested in test_fuzz_data)
    rejected: dict[int, str] = {}
    out = tokenize_records(qwen3, usable, messages="m", progress=False, rejected=rejected)
    assert len(out) == len(usable)
    for i, ex in enumerate(out):
        assert len(ex.input_ids) == len(ex.labels)
        assert all(lab in (IGNORE, tid) for lab, tid in zip(ex.labels, ex.input_ids, strict=True))
        if i in rejected:
            assert len(ex) == 0 and rejected[i]


garbage = st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode),
                    st.sampled_from([b"{}", b"[]", b'{"model": {}}', b'{"version": "1.0", "model": {"type": "BPE"}}',
                                     b"\x80\x04\x95", json.dumps({"eos_token": 5}).encode()]))


@settings(max_examples=examples(40))
@given(layout=st.sampled_from(["missing", "empty-dir", "tokenizer.json", "dir-json", "dir-config-only", "model",
                               "data-file", "dir-both"]), content=garbage)
def test_a_bad_tokenizer_is_one_error(tmp_path_factory: Any, layout: str, content: bytes) -> None:
    pytest.importorskip("transformers")
    from memfit.data.tokenizer import load_tokenizer

    folder: Path = tmp_path_factory.mktemp("tok")
    target = {"missing": folder / "nope", "empty-dir": folder, "tokenizer.json": folder / "tokenizer.json",
              "dir-json": folder, "dir-config-only": folder, "model": folder / "tokenizer.model",
              "data-file": folder / "d.jsonl", "dir-both": folder}[layout]
    if layout in ("tokenizer.json", "dir-json", "dir-both"):
        (folder / "tokenizer.json").write_bytes(content)
    if layout in ("dir-config-only", "dir-both"):
        (folder / "tokenizer_config.json").write_bytes(content)
    if layout == "model":
        target.write_bytes(content)
    if layout == "data-file":
        target.write_bytes(content)
    try:
        tok = load_tokenizer(target)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert tok("abc")["input_ids"] is not None  # it loaded: then it works
