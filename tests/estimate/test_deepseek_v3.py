"""DeepSeek-V3 (multi-head latent attention, shared + routed experts, dense-first layers) and Qwen3-MoE's dense
layers (``mlp_only_layers``, ``decoder_sparse_step``): the per-layer MLP kind, against transformers 5.24.0 and
PEFT 0.21.2 on the meta device."""

from __future__ import annotations

import pytest
from test_architectures import (
    _meta_model,
    check_lora,
    check_module_names,
    check_parameters,
    tiny,
)

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, count_params, estimate_memory, lookup
from memfit.estimate.params import layer_kind_names

# Golden counts: transformers 5.24.0's DeepseekV3ForCausalLM built from the catalogue configs on the meta device
# (``AutoModelForCausalLM.from_config(..., attn_implementation="eager")`` under ``torch.device("meta")``, summing
# ``p.numel()`` over ``named_parameters()``; e_score_correction_bias is a buffer), run 2026-12-01.
GOLDEN_TOTALS = {"deepseek-v3": 671_026_404_352, "moonlight-16b-a3b": 15_960_108_544}
# Moonlight per module kind (same run; summed over the 27 layers: layer 0 dense, 26 MoE): the three MLP names
# hold the dense MLP, the shared experts' and (down_proj) the routed experts' down projection together
GOLDEN_MOONLIGHT = {"q_proj": 169_869_312, "kv_a_proj_with_mqa": 31_850_496, "kv_a_layernorm": 13_824,
                    "kv_b_proj": 56_623_104, "o_proj": 113_246_208, "gate_proj": 173_015_040,
                    "up_proj": 173_015_040, "down_proj": 4_971_298_816, "gate_up_proj": 9_596_567_552,
                    "gate": 3_407_872, "input_layernorm": 55_296, "post_attention_layernorm": 55_296}

# a tiny DeepSeek: q bottleneck, narrow latent, 4 experts in 1 group, layer 0 dense
DEEPSEEK = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12,
            "intermediate_size": 96, "first_k_dense_replace": 1, "n_shared_experts": 2, "n_group": 1,
            "topk_group": 1}


@pytest.mark.parametrize("name", sorted(GOLDEN_TOTALS))
def test_catalogue_totals_equal_transformers_meta(name: str) -> None:
    assert count_params(lookup(name).shape).total == GOLDEN_TOTALS[name]


def test_moonlight_per_kind_equals_transformers_meta() -> None:
    shape = lookup("moonlight-16b-a3b").shape
    by_kind, kinds = count_params(shape).by_kind, layer_kind_names(shape)
    leaf: dict[str, int] = {}
    for path, kind in kinds.items():
        leaf[path.rsplit(".", 1)[-1]] = leaf.get(path.rsplit(".", 1)[-1], 0) + by_kind[kind]
    assert leaf == GOLDEN_MOONLIGHT
    assert [n for _, n in shape.layer_groups()] == [1, 26]  # first_k_dense_replace 1


@pytest.mark.parametrize("extra", [{}, {"q_lora_rank": None}, {"first_k_dense_replace": 0},
                                   {"first_k_dense_replace": 2}, {"attention_bias": True}])
def test_tiny_deepseek_counts_names_and_lora_equal_transformers(extra: dict[str, object]) -> None:
    config = tiny("deepseek_v3", **{**DEEPSEEK, **extra})
    check_parameters(config)
    check_module_names(config)
    check_lora(config, ("all-linear",))
    check_lora(config, ("kv_b_proj", "o_proj"))


def test_all_linear_leaves_deepseeks_dense_and_shared_mlps_alone() -> None:
    """PEFT 0.21.2 maps deepseek_v3 to the qwen2_moe conversion: all-linear's gate_proj / up_proj / down_proj become
    the fused experts' target_parameters, so the dense layer's MLP and the shared experts get no adapter (checked
    against PEFT by check_lora above); named in --targets they are the fused experts too (PEFT converts the names),
    and one of the fused pair alone is PEFT's error."""
    from memfit.estimate.lora import adapted_linears

    shape = ModelShape.from_hf_config(tiny("deepseek_v3", **DEEPSEEK))
    spec = RunSpec(method="lora", targets=("all-linear",))
    for i in range(shape.n_layers):
        names = {lin.path for lin in adapted_linears(shape.layer_shape(i), spec, check=False)}
        assert not {p for p in names if p.endswith(("gate_proj", "up_proj", "down_proj")) and "experts." not in p}
    named = RunSpec(method="lora", targets=("gate_proj", "up_proj", "down_proj"))
    for i in range(shape.n_layers):
        names = {lin.path for lin in adapted_linears(shape.layer_shape(i), named, check=False)}
        assert names == ({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"} if i else set())
    with pytest.raises(MemfitError, match="without also targeting up_proj because they are fused into gate_up_proj"):
        estimate_memory(shape, RunSpec(method="lora", targets=("gate_proj", "down_proj")))


def test_peft_has_no_default_targets_for_deepseek() -> None:
    shape = ModelShape.from_hf_config(tiny("deepseek_v3", **DEEPSEEK))
    with pytest.raises(MemfitError, match="--targets kv_b_proj,o_proj"):
        estimate_memory(shape, RunSpec(method="lora"))


@pytest.mark.parametrize("extra", [{"mlp_only_layers": [0]}, {"mlp_only_layers": [1]}, {"decoder_sparse_step": 2}])
def test_qwen3_moe_dense_layers_equal_transformers(extra: dict[str, object]) -> None:
    """Dense Qwen3MoeMLP layers (intermediate_size) among the MoE ones where transformers 5.24 puts them
    (``layer_idx in mlp_only_layers`` or ``(layer_idx + 1) % decoder_sparse_step != 0``): counts, names, LoRA."""
    config = tiny("qwen3_moe", **extra, norm_topk_prob=True)
    shape = ModelShape.from_hf_config(config)
    assert sum(shape.dense_mlp) == 1
    check_parameters(config)
    check_module_names(config)
    check_lora(config, ("all-linear",))
    check_lora(config, ("q_proj", "v_proj"))


def test_dense_layers_change_the_estimate() -> None:
    """One dense layer of intermediate 96 in place of 4 experts of 96: fewer parameters (3*64*96 dense against
    64*4 + 4*3*64*96 experts per layer) and an estimate that differs from the all-MoE model's."""
    moe = ModelShape.from_hf_config(tiny("qwen3_moe", intermediate_size=96, norm_topk_prob=True))
    dense = ModelShape.from_hf_config(tiny("qwen3_moe", intermediate_size=96, mlp_only_layers=[0], norm_topk_prob=True))
    assert count_params(moe).total - count_params(dense).total == 64 * 4 + 4 * 3 * 64 * 96 - 3 * 64 * 96
    spec = RunSpec(method="full", precision="fp32", attention="eager", batch=1, seq=32, device="cpu")
    assert estimate_memory(moe, spec).peak_bytes != estimate_memory(dense, spec).peak_bytes


def test_bad_dense_layer_fields_name_the_field() -> None:
    for extra, field in (({"mlp_only_layers": "0"}, "mlp_only_layers"), ({"decoder_sparse_step": 0},
                         "decoder_sparse_step")):
        with pytest.raises(MemfitError, match=field):
            ModelShape.from_hf_config(tiny("qwen3_moe", **extra))
    with pytest.raises(MemfitError, match="first_k_dense_replace"):
        ModelShape.from_hf_config(tiny("deepseek_v3", **{**DEEPSEEK, "first_k_dense_replace": -1}))


def test_meta_model_builds() -> None:
    assert _meta_model(tiny("deepseek_v3", **DEEPSEEK)) is not None


@pytest.mark.parametrize("groups", [{"n_group": 3}, {"n_group": 4}, {"n_group": 2, "topk_group": 3}])
def test_expert_groups_that_transformers_cannot_route_are_refused(groups: dict[str, int]) -> None:
    """DeepseekV3TopkRouter views the E scores as (n_group, E / n_group) and takes topk(2) in each group, then
    topk_group groups: 4 experts in 3 groups (no such view), in 4 groups of 1 (topk(2) of 1) or topk_group 3 of 2
    groups (topk(3) of 2) fail in the forward."""
    with pytest.raises(MemfitError, match="n_group .* topk_group .* do not fit 4 experts"):
        ModelShape.from_hf_config(tiny("deepseek_v3", **{**DEEPSEEK, **groups}))


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_weight_bytes_keep_the_router_fp32_as_transformers_does(precision: str) -> None:
    """transformers 5.24.0 builds DeepseekV3TopkRouter's weight with ``dtype=torch.float32``, and a bf16 model keeps
    it fp32 (``_keep_in_fp32_modules_strict``): the frozen weights of a LoRA run are the meta model's
    sum(numel x element_size) under ``from_config(dtype=...)``, byte for byte; a full bf16 fine-tune's gradients
    and AdamW moments are fp32 for the router too (+2 B each per router element over the bf16 rest)."""
    torch = pytest.importorskip("torch")
    config = tiny("deepseek_v3", **DEEPSEEK)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    with torch.device("meta"):
        import transformers
        from test_architectures import _hf_config
        model = transformers.AutoModelForCausalLM.from_config(_hf_config(config), attn_implementation="eager",
                                                              dtype=dtype)
    hf_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    router = sum(p.numel() for n, p in model.named_parameters() if n.endswith("mlp.gate.weight"))
    assert router and {p.dtype for n, p in model.named_parameters() if n.endswith("mlp.gate.weight")} == {torch.float32}
    from memfit.estimate.states import model_states

    shape = ModelShape.from_hf_config(config)
    lora = model_states(shape, RunSpec(method="lora", targets=("kv_b_proj",), precision=precision, device="cpu"))
    assert lora.weights_frozen == hf_bytes
    full = model_states(shape, RunSpec(method="full", precision=precision, device="cpu"))
    assert full.weights_trainable == hf_bytes and full.gradients == hf_bytes
    assert full.optimizer == 2 * hf_bytes + 4 * sum(1 for _ in model.parameters())  # moments + cpu step counters
