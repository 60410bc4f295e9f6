"""config.json, fuzzed at the boundary every engine reads through (memfit.estimate.read_config_file,
validate_config, ModelShape): wrong types, out-of-range and absurd values, missing and extra fields, odd
encodings (a UTF-8 BOM, UTF-16, Latin-1, random bytes), deep nesting, nested text_config. Each config either
gives a shape whose sizes are the positive integers it says, or one MemfitError; estimate's CLI on the same
file keeps the CLI contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fuzzing import assert_cli_contract, examples, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from memfit.errors import MemfitError

BASES: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512},
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 512},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256},
}
SIZE_KEYS = sorted({k for b in BASES.values() for k, v in b.items() if isinstance(v, int)} | {"head_dim"})

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                        st.text(max_size=6), st.sampled_from([0, 1, -1, 2, 3, 7, 16, 64, 4096, 10**9, 10**15, 2.0,
                                                              "64", "", "auto"]))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                          max_leaves=6)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    cfg = dict(BASES[draw(st.sampled_from(sorted(BASES)))])
    for key in draw(st.lists(st.sampled_from(SIZE_KEYS + ["model_type"]), max_size=4, unique=True)):
        action = draw(st.sampled_from(["set", "drop", "scale"]))
        if action == "drop":
            cfg.pop(key, None)
        elif action == "scale" and isinstance(cfg.get(key), int):
            cfg[key] = cfg[key] * draw(st.sampled_from([0, -1, 2, 3, 10**6, 10**12])) + draw(st.integers(-2, 2))
        else:
            cfg[key] = draw(json_value)
    for _ in range(draw(st.integers(0, 2))):  # extra fields of any kind
        cfg[draw(st.text(min_size=1, max_size=12))] = draw(json_value)
    if draw(st.booleans()) and draw(st.booleans()):  # a multimodal wrapper around the language config
        cfg = {"architectures": ["X"], "text_config": cfg, "vision_config": {"hidden_size": 8}}
    return cfg


def _encode(cfg: dict[str, Any], how: str) -> bytes:
    text = json.dumps(cfg)
    return {"utf8": text.encode(), "bom": b"\xef\xbb\xbf" + text.encode(), "utf16": text.encode("utf-16"),
            "latin1": text.encode("latin-1", "replace"), "truncated": text.encode()[: max(1, len(text) // 2)],
            "deep": ("[" * 5000 + "]" * 5000).encode(), "array": b"[1, 2]", "huge-int": b'{"x": ' + b"9" * 5000 + b"}",
            "empty": b""}[how]


ENCODINGS = ["utf8", "utf8", "utf8", "bom", "utf16", "latin1", "truncated", "deep", "array", "huge-int", "empty"]


def _check_shape(shape: Any) -> None:
    for name in ("n_layers", "hidden", "n_heads", "n_kv_heads", "vocab", "intermediate", "head_dim"):
        value = getattr(shape, name)
        assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (name, value)
    assert shape.n_heads % shape.n_kv_heads == 0


@settings(max_examples=examples(150))
@given(cfg=configs(), how=st.sampled_from(ENCODINGS), as_dir=st.booleans())
def test_any_config_file_is_a_valid_shape_or_one_error(tmp_path_factory: Any, cfg: dict[str, Any], how: str,
                                                       as_dir: bool) -> None:
    from memfit.estimate import read_config_file, resolve_model, validate_config

    folder: Path = tmp_path_factory.mktemp("cfg")
    path = folder / "config.json"
    path.write_bytes(_encode(cfg, how))
    target = str(folder if as_dir else path)
    try:
        raw, _ = read_config_file(target)
        validate_config(raw)
        shape = resolve_model(target)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    _check_shape(shape)


@settings(max_examples=examples(20))
@given(cfg=configs(), how=st.sampled_from(ENCODINGS), flags=st.sampled_from([
    [], ["--method", "lora"], ["--method", "qlora", "--gpu", "24GiB", "--check"], ["--checkpointing", "full"],
    ["--batch", "2", "--seq", "64", "--attention", "eager"]]))
def test_estimate_cli_on_any_config_keeps_the_contract(tmp_path_factory: Any, cfg: dict[str, Any], how: str,
                                                       flags: list[str]) -> None:
    folder: Path = tmp_path_factory.mktemp("cfg")
    (folder / "config.json").write_bytes(_encode(cfg, how))
    for extra in ([], ["--json"]):
        argv = ["estimate", str(folder), *flags, *extra]
        code, out, err = run_cli(argv)
        assert_cli_contract(argv, code, out, err)


@settings(max_examples=examples(30))
@given(name=st.one_of(st.text(max_size=20), st.sampled_from(["", " ", "/", "..", "~", "org/name", "a/b/c", "-",
                                                             "/proc/self/status", "/dev/null", "/etc", "gpt2 ",
                                                             "GPT2", "nul\x00byte"])))
def test_any_model_name_is_a_model_or_one_error(name: str) -> None:
    from memfit.estimate import resolve_model

    try:
        _check_shape(resolve_model(name))
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
