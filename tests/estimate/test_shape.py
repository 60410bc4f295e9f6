"""ModelShape from HF configs: every generation of config.json, and clear errors for bad ones."""

from __future__ import annotations

import json

import pytest

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, catalogue, lookup, resolve_model


def test_llama_facts_read_from_config() -> None:
    s = lookup("llama-3.1-8b").shape
    assert (s.n_layers, s.hidden, s.n_heads, s.n_kv_heads, s.head_dim) == (32, 4096, 32, 8, 128)
    assert (s.intermediate, s.vocab, s.tie_embeddings) == (14336, 128256, False)
    assert (s.layout.norm, s.layout.mlp, s.layout.position, s.activation) == ("rmsnorm", "gated", "rotary", "silu")
    assert s.rope_theta == 500000.0


def test_gpt2_generation_keys() -> None:
    """GPT-2's config uses n_embd / n_layer / n_head / n_positions and no intermediate size."""
    s = ModelShape.from_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4,
                                   "n_positions": 128, "vocab_size": 1000, "activation_function": "gelu_new"})
    assert (s.hidden, s.n_layers, s.n_heads, s.intermediate, s.max_positions) == (64, 3, 4, 256, 128)
    assert (s.layout.norm, s.layout.position, s.layout.mlp, s.tie_embeddings) == ("layernorm", "learned", "plain", True)


def test_rope_parameters_v5_layout() -> None:
    """transformers 5 writes rope_parameters instead of rope_theta."""
    cfg = dict(lookup("llama-2-7b").config)
    cfg.pop("rope_theta", None)
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 12345.0}
    assert ModelShape.from_hf_config(cfg).rope_theta == 12345.0


def test_special_architectures() -> None:
    assert lookup("qwen3-8b").shape.layout.qk_norm == "head"
    g = lookup("gemma-2-2b").shape
    assert (g.attn_softcap, g.final_softcap, g.tie_embeddings) == (50.0, 30.0, True)
    assert g.layout.post_attn_norm and g.layout.post_mlp_norm  # Gemma 2's sandwich norms
    assert g.activation == "gelu_pytorch_tanh" and g.head_dim == 256
    m = lookup("mixtral-8x7b").shape
    assert (m.n_experts, m.experts_per_token) == (8, 2)
    q = lookup("qwen2.5-0.5b").shape
    assert q.qkv_bias and not q.o_bias
    assert lookup("phi-3-mini").shape.layout.fused_qkv
    n = ModelShape.from_hf_config({"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2,
                                   "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100,
                                   "rotary_pct": 0.25})
    assert n.parallel_residual and n.rotary_fraction == 0.25 and n.qkv_bias


def test_catalogue_names_case_insensitive_and_suggestions() -> None:
    assert lookup("LLaMA-3.1-8B").name == "llama-3.1-8b"
    with pytest.raises(MemfitError, match="did you mean"):
        lookup("llama-3.1-8")
    assert len(catalogue()) >= 18


def test_config_file_and_directory(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(lookup("gpt2").config))
    assert resolve_model(str(tmp_path)).hidden == 768
    assert resolve_model(str(tmp_path / "config.json")).n_layers == 12


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"model_type": "bert", "hidden_size": 8}), "not supported yet"),
        (json.dumps({"hidden_size": 8}), "no model_type"),
        (json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                     "intermediate_size": 128, "vocab_size": 10}), "num_hidden_layers"),
        (json.dumps({"model_type": "llama", "num_hidden_layers": "two", "hidden_size": 64,
                     "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10}), "positive integer"),
    ],
)
def test_bad_configs_give_one_clear_error(tmp_path, content: str, message: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(content)
    with pytest.raises(MemfitError, match=message):
        resolve_model(str(p))


def test_missing_file(tmp_path) -> None:
    with pytest.raises(MemfitError, match="no config.json"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


# ---- the boundary: invalid configs and config files (issue 21 #12, #15) --------------------------------

from bad_configs import BAD_CONFIGS, BAD_IDS  # noqa: E402
from memfit.cli import main  # noqa: E402


@pytest.mark.parametrize(("name", "config", "message"), BAD_CONFIGS, ids=BAD_IDS)
def test_invalid_configs_are_refused_by_the_estimate(tmp_path, capsys, name: str, config: dict,
                                                     message: str) -> None:
    """Each of these used to produce an estimate (or a traceback in trace): now one message naming the field."""
    with pytest.raises(MemfitError, match=message.replace("(", r"\(")):
        ModelShape.from_hf_config(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["estimate", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err


def test_architectures_without_kv_heads_ignore_the_key() -> None:
    """GPT-2, GPT-NeoX and OPT are multi-head: transformers never reads num_key_value_heads or head_dim there."""
    s = ModelShape.from_hf_config({"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
                                   "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
                                   "num_key_value_heads": 0, "head_dim": 7})
    assert (s.n_kv_heads, s.head_dim) == (4, 16)


def test_absent_keys_take_transformers_defaults() -> None:
    """kv heads, head_dim and Mixtral's experts left out of config.json: the values transformers 5.24's config
    classes give them (read from transformers itself, the independent source)."""
    transformers = pytest.importorskip("transformers")
    from memfit.estimate import REGISTRY

    checked = 0
    for t, arch in REGISTRY.items():
        if not arch.keys.kv_heads:  # multi-head only (GPT-2, GPT-NeoX, OPT): no key to default
            continue
        cfg = {"model_type": t, "num_hidden_layers": 1, "hidden_size": 512, "num_attention_heads": 32,
               "intermediate_size": 128, "vocab_size": 256}
        shape = ModelShape.from_hf_config(cfg)
        hf = transformers.AutoConfig.for_model(t, **{k: v for k, v in cfg.items() if k != "model_type"})
        hf_head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        assert (shape.n_kv_heads, shape.head_dim) == (hf.num_key_value_heads, hf_head_dim), t
        if arch.layout.moe is not None:
            assert (shape.n_experts, shape.experts_per_token) == (hf.num_local_experts, hf.num_experts_per_tok)
        checked += 1
    assert checked == sum(1 for a in REGISTRY.values() if a.keys.kv_heads) >= 8


def test_heads_must_divide_hidden_exactly_where_transformers_requires_it() -> None:
    """hidden 66 with 4 heads (and 4 kv heads): transformers refuses it for llama, gemma2, gpt2, gpt_neox and opt
    (config validation or the attention's __init__) and builds the others; the estimate agrees on each."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from memfit.estimate import REGISTRY
    from memfit.runtime.build import tiny_config

    for t in REGISTRY:
        cfg = tiny_config(t, layers=1, hidden=66, heads=4, kv_heads=4, pad_token_id=0)
        try:
            with torch.device("meta"):
                hf = transformers.AutoConfig.for_model(t, **{k: v for k, v in cfg.items() if k != "model_type"})
                transformers.AutoModelForCausalLM.from_config(hf)
            transformers_builds = True
        except Exception:
            transformers_builds = False
        try:
            ModelShape.from_hf_config(cfg)
            memfit_accepts = True
        except MemfitError:
            memfit_accepts = False
        assert memfit_accepts == transformers_builds, t


def test_oversized_config_file_is_refused_without_reading_it(tmp_path) -> None:
    """A 64 MiB sparse file (no disk used): refused on its size by all three readers, before any parsing (the
    old readers read it whole and then reported invalid JSON)."""
    from memfit.cli.trace import load_config
    from memfit.estimate import resolve_config

    limit = 16 * 1024**2  # 16 MiB
    big = tmp_path / "config.json"
    with big.open("wb") as f:
        f.truncate(64 * 1024**2)
    for reader in (resolve_model, resolve_config, load_config):
        with pytest.raises(MemfitError, match=f"over {limit:,} B"):
            reader(str(big))


def test_a_stream_without_a_size_is_read_only_up_to_the_cap(tmp_path) -> None:
    """A named pipe reports size 0: the reader stops at the cap plus one byte of the 20 MiB written into it."""
    import os
    import threading

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)

    def write() -> None:
        try:
            with fifo.open("wb") as f:
                f.write(b" " * (20 * 1024**2))
        except BrokenPipeError:  # the reader stopped at the cap and closed its end
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    with pytest.raises(MemfitError, match="over 16,777,216 B"):
        resolve_model(str(fifo))
    writer.join(timeout=10)


@pytest.mark.parametrize("case", ["symlink-loop", "config-is-a-directory", "deeply-nested", "huge-integer"])
def test_broken_config_files_are_one_line(tmp_path, capsys, case: str) -> None:
    """`memfit params DIR` with a config.json that is a symlink loop or a directory, or JSON nested 100,000 deep:
    one red line naming the file (a traceback before)."""
    if case == "symlink-loop":
        (tmp_path / "config.json").symlink_to(tmp_path / "config.json")
        message = "cannot read"
    elif case == "config-is-a-directory":
        (tmp_path / "config.json").mkdir()
        message = "is a directory"
    elif case == "deeply-nested":
        (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
        message = "nests its JSON deeper"
    else:
        (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
        message = "not valid JSON"
    for command in (["params", str(tmp_path)], ["estimate", str(tmp_path)]):
        assert main(command) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
