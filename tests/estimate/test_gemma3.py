"""Gemma 3 (issue 13): its layer pattern, its two rope tables and its multimodal config.json, each against an
independent oracle (transformers' own config class, a real CPU training step, the model transformers builds)."""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import ModelShape, RunSpec, count_params, estimate_memory, lookup
from memfit.estimate.shape import language_config


def _tiny(layers: int, **extra: Any) -> dict[str, Any]:
    """h=64, 4 heads of d=16 (query_pre_attn_scalar = d), 2 kv heads, i=128, V=300."""
    return {"model_type": "gemma3_text", "num_hidden_layers": layers, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16, "intermediate_size": 128,
            "vocab_size": 300, "max_position_embeddings": 256, "pad_token_id": 0, **extra}


def test_every_sixth_layer_is_full_as_transformers_says() -> None:
    """Gemma-3-1B (26 layers, sliding_window_pattern 6): layer i slides unless (i + 1) % 6 == 0, so layers 5, 11,
    17 and 23 are full, the other 22 sliding; transformers' Gemma3TextConfig.__post_init__ builds the same list."""
    transformers = pytest.importorskip("transformers")
    shape = lookup("gemma-3-1b").shape
    assert [i for i, t in enumerate(shape.layer_types) if t == "full"] == [5, 11, 17, 23]
    cfg = {k: v for k, v in lookup("gemma-3-1b").config.items() if k not in ("model_type", "torch_dtype")}
    hf = transformers.AutoConfig.for_model("gemma3_text", **cfg).layer_types
    assert list(shape.layer_types) == ["sliding" if t == "sliding_attention" else "full" for t in hf]
    # a config's own list wins over the pattern
    listed = ["full_attention", "sliding_attention"]
    assert ModelShape.from_hf_config(_tiny(2, layer_types=listed)).layer_types == ("full", "sliding")


@pytest.mark.slow
def test_one_rope_table_per_layer_type_against_a_real_step() -> None:
    """Gemma 3 makes cos and sin once per layer type (a global and a local rope base). LoRA q/v fp32, b=1, s=32,
    d=16: one pair is 2 x 32*16*4 = 4,096 B. Two layers are both sliding: 4,096 B; six layers hold five sliding
    and one full: 8,192 B. With six layers the real step's saved bytes (1,141,452 B measured) need both pairs:
    one pair alone would be 4,096 B (0.36%) short."""
    torch = pytest.importorskip("torch")
    from memfit.validate.steps import real_steps

    spec = RunSpec(method="lora", precision="fp32", batch=1, seq=32, device="cpu", attention="sdpa")
    assert estimate_memory(ModelShape.from_hf_config(_tiny(2)), spec).activations.shared == 4_096
    config = _tiny(6)
    est = estimate_memory(ModelShape.from_hf_config(config), spec)
    assert est.activations.shared == 8_192
    torch.set_num_threads(1)
    measured = real_steps(config, spec, steps=2)
    assert est.activation_bytes == pytest.approx(measured.saved_bytes, rel=1e-3)
    assert est.peak_bytes == pytest.approx(measured.peak_bytes, rel=0.01)


def test_a_gemma3_multimodal_config_is_read_and_built_through_its_text_config() -> None:
    """A ``gemma3`` config.json (Gemma-3-4B/12B/27B) nests the language model under ``text_config``: the estimate
    reads it, and trace and measure build that language model (Gemma3ForCausalLM), not the vision tower."""
    pytest.importorskip("torch")
    from memfit.runtime.build import build_meta_model

    text = _tiny(2)
    multimodal = {"model_type": "gemma3", "mm_tokens_per_image": 256, "text_config": text}
    assert language_config(multimodal) is text
    spec = RunSpec(method="lora", precision="bf16", batch=1, seq=32, device="cpu")
    assert estimate_memory(ModelShape.from_hf_config(multimodal), spec).peak_bytes == estimate_memory(
        ModelShape.from_hf_config(text), spec).peak_bytes
    model = build_meta_model(multimodal, RunSpec(method="full", precision="bf16"))
    assert type(model).__name__ == "Gemma3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == count_params(ModelShape.from_hf_config(text)).total
    from memfit.measure.point import measure_point
    from memfit.trace.engine import trace_step

    traced = trace_step(multimodal, spec).peak_bytes
    assert traced == trace_step(text, spec).peak_bytes
    assert measure_point(multimodal, spec, steps=0, warmup=0).peak_bytes == traced  # the trace is byte-exact
    # the catalogue's Gemma-3-12B is that config.json: 48 layers of h=3840 (11,766,034,176 parameters)
    shape = lookup("gemma-3-12b").shape
    assert (shape.model_type, shape.n_layers, shape.hidden, shape.vocab) == ("gemma3_text", 48, 3840, 262_208)
    assert count_params(shape).total == 11_766_034_176


@pytest.mark.slow
def test_sliding_layers_take_an_sdpa_mask_once_the_sequence_reaches_the_window() -> None:
    """transformers 5.24 skips the sdpa mask of a sliding layer (``is_causal`` instead) only while the sequence is
    shorter than the window. Six layers (five sliding, one full), window 16, LoRA q/v fp32 sdpa, b=2: at s=15 no
    layer takes a mask; at s=32 the five sliding layers do, as the padding-mask path has it: each keeps the
    (b, 1, s, s) fp32 mask 2*32*32*4 = 8,192 B, and k and v repeated to the 4 heads (2 x 2*4*32*16*4 = 32,768 B)
    in place of the 2 kv heads' (16,384 B): 24,576 B more per sliding layer. The real step saves 1,800,900 B at
    s=32, the estimate's figure; without the masks it is 5 x 24,576 = 122,880 B (6.8%) short."""
    torch = pytest.importorskip("torch")
    from memfit.estimate.activations import sdpa_masked_layers
    from memfit.validate.steps import real_steps

    config = _tiny(6, sliding_window=16)
    shape = ModelShape.from_hf_config(config)
    spec = RunSpec(method="lora", precision="fp32", batch=2, seq=32, device="cpu", attention="sdpa")
    assert sdpa_masked_layers(shape, spec) == (True,) * 5 + (False,)
    assert not any(sdpa_masked_layers(shape, spec.with_(seq=15)))
    assert not any(sdpa_masked_layers(shape, spec.with_(attention="eager")))
    torch.set_num_threads(1)
    for s in (15, 32):
        measured = real_steps(config, spec.with_(seq=s), steps=2)
        est = estimate_memory(shape, spec.with_(seq=s))
        assert est.activation_bytes == pytest.approx(measured.saved_bytes, rel=1e-4), s
        assert est.peak_bytes == pytest.approx(measured.peak_bytes, rel=1e-3), s
