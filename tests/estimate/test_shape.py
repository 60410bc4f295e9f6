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
    assert (s.norm, s.mlp, s.position, s.activation) == ("rmsnorm", "gated", "rotary", "silu")
    assert s.rope_theta == 500000.0


def test_gpt2_generation_keys() -> None:
    """GPT-2's config uses n_embd / n_layer / n_head / n_positions and no intermediate size."""
    s = ModelShape.from_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4,
                                   "n_positions": 128, "vocab_size": 1000, "activation_function": "gelu_new"})
    assert (s.hidden, s.n_layers, s.n_heads, s.intermediate, s.max_positions) == (64, 3, 4, 256, 128)
    assert (s.norm, s.position, s.mlp, s.tie_embeddings) == ("layernorm", "learned", "plain", True)


def test_rope_parameters_v5_layout() -> None:
    """transformers 5 writes rope_parameters instead of rope_theta."""
    cfg = dict(lookup("llama-2-7b").config)
    cfg.pop("rope_theta", None)
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 12345.0}
    assert ModelShape.from_hf_config(cfg).rope_theta == 12345.0


def test_special_architectures() -> None:
    assert lookup("qwen3-8b").shape.qk_norm
    g = lookup("gemma-2-2b").shape
    assert (g.attn_softcap, g.final_softcap, g.sandwich_norms, g.tie_embeddings) == (50.0, 30.0, True, True)
    assert g.activation == "gelu_pytorch_tanh" and g.head_dim == 256
    m = lookup("mixtral-8x7b").shape
    assert (m.n_experts, m.experts_per_token) == (8, 2)
    q = lookup("qwen2.5-0.5b").shape
    assert q.qkv_bias and not q.o_bias
    assert lookup("phi-3-mini").shape.fused_qkv
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
