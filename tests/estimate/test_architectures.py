"""Every registry entry against transformers 5.24.0 and PEFT 0.21.2 themselves (the independent oracles):
parameters per module on the meta device, LoRA trainable counts, module names, config-class defaults,
attention kernels and PEFT's default targets. A new entry is checked by these tests without editing them;
OLMo 2 (issue 13) is the example of an entry made of existing flags only.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from memfit.estimate import REGISTRY, ModelShape, RunSpec, count_params, estimate_memory, lora_trainable_params
from memfit.estimate.arch import Architecture
from memfit.estimate.arch.keys import Size
from memfit.estimate.lora import module_names

SRC = Path(__file__).resolve().parents[2] / "src" / "memfit"


def tiny(model_type: str, **extra: Any) -> dict[str, Any]:
    """A 2-layer config of a registered architecture under its own keys (4 experts for MoE layouts; token id 0
    for padding: some classes default pad_token_id beyond a tiny vocabulary)."""
    arch = REGISTRY[model_type]
    moe = arch.keys.moe_sizes(4, 2)
    sizes = arch.keys.write(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=300, positions=256)
    return {"model_type": model_type, **sizes, "pad_token_id": 0, **moe, **extra}


def flipped(model_type: str) -> dict[str, Any]:
    """The tiny config with every boolean the architecture reads from its config set against its default
    (biases on or off, GPT-NeoX's serial residual, untied embeddings ...): transformers must agree on each."""
    k = REGISTRY[model_type].keys
    flags = (k.tie_embeddings, k.qkv_bias, k.o_bias, k.mlp_bias, k.parallel_residual, k.final_norm, k.qk_norm_enabled)
    return tiny(model_type, **{f.names[0]: not f.default for f in flags if f.names})


def _hf_config(config: dict[str, Any]) -> Any:
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype", "dtype")}
    return transformers.AutoConfig.for_model(config["model_type"], **cfg)


def _meta_model(config: dict[str, Any]) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(_hf_config(config), attn_implementation="eager")


# ---- the checks (each a function: the registration test runs them on an entry of its own) ----------------

def check_parameters(config: dict[str, Any]) -> None:
    """The total, and every block linear and norm layer by layer, equal the model transformers builds."""
    shape, model = ModelShape.from_hf_config(config), _meta_model(config)
    params = {n: p.numel() for n, p in model.named_parameters()}
    assert count_params(shape).total == sum(params.values())
    for i in range(shape.n_layers):
        prefix = f"{shape.arch.names.model.layers}.{i}."
        layer = shape.layer_shape(i)  # a MoE model's dense-MLP layers (DeepSeek's first_k_dense_replace) differ
        for module in layer.linears() + layer.norms() + layer.block_params():
            path = prefix + module.path
            # a fused expert parameter's bias is its sibling ``<name>_bias`` (GPT-OSS's gate_up_proj_bias)
            hf = sum(n for k, n in params.items() if k in (path, path + "_bias") or k.startswith(path + "."))
            assert module.numel == hf, (config["model_type"], module.path)


def check_lora(config: dict[str, Any], targets: tuple[str, ...]) -> None:
    peft = pytest.importorskip("peft")
    spec = RunSpec(method="lora", rank=8, targets=targets)
    tm = None if not targets else ("all-linear" if targets == ("all-linear",) else list(targets))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = peft.get_peft_model(_meta_model(config), peft.LoraConfig(r=8, target_modules=tm, task_type="CAUSAL_LM"))
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == sum(
        p.numel() for p in pm.parameters() if p.requires_grad)


def check_module_names(config: dict[str, Any]) -> None:
    real = {k for k, _ in _meta_model(config).named_modules(remove_duplicate=False) if k}
    assert set(module_names(ModelShape.from_hf_config(config))) == real


def check_config_defaults(arch: Architecture) -> None:
    """Each default in the entry's ConfigKeys is the config class's field default (an absent key means what
    transformers makes of it); the rotary fraction as the built config resolves it."""
    transformers = pytest.importorskip("transformers")
    cls = transformers.CONFIG_MAPPING[arch.model_type]
    k = arch.keys
    keys: list[Any] = [k.activation, k.norm_eps, k.tie_embeddings, k.qkv_bias, k.o_bias, k.mlp_bias,
                       k.parallel_residual, k.final_norm, k.final_norm_dropped, k.attn_softcap, k.final_softcap,
                       k.sliding_window, k.sliding_enabled, k.max_window_layers, k.positions, k.experts,
                       k.experts_per_token, k.qk_norm_enabled]
    checked = 0
    for key in keys:
        if key is None or not key.names or (isinstance(key, Size) and key.default is None):
            continue
        assert getattr(cls, key.names[0]) == key.default, (arch.model_type, key.names[0])
        checked += 1
    for dropout in (k.attention_dropout, k.residual_dropout, k.embedding_dropout, k.attn_residual_dropout):
        if dropout is not None and dropout.name:
            assert getattr(cls, dropout.name) == dropout.default, (arch.model_type, dropout.name)
    if k.kv_heads:
        assert getattr(cls, k.kv_heads[0]) == k.kv_heads_default
        assert getattr(cls, "head_dim", None) == k.head_dim_default
    if k.multi_query.names:
        assert getattr(cls, k.multi_query.names[0]) == k.multi_query.default
    if k.rotary_fraction.names:  # transformers 5 keeps it in rope_parameters (GPT-NeoX: from rotary_pct)
        rope = _hf_config(tiny(arch.model_type)).rope_parameters or {}
        assert rope.get("partial_rotary_factor", 1.0) == k.rotary_fraction.default
    assert checked >= 3  # guard: the activation, norm epsilon and tied embeddings at least


def check_attention_kernels(arch: Architecture) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    model_cls = MODEL_FOR_CAUSAL_LM_MAPPING[transformers.CONFIG_MAPPING[arch.model_type]]
    expected = {"eager"} | ({"sdpa"} if model_cls._supports_sdpa else set()) | (
        {"flash"} if model_cls._supports_flash_attn else set())
    assert set(arch.attention_kernels) == expected


def check_peft_targets(arch: Architecture) -> None:
    pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    peft_targets = PEFT_TARGETS.get(arch.model_type)
    assert arch.lora_targets == (tuple(peft_targets) if peft_targets is not None else None)


def check_estimates(model_type: str) -> None:
    """Every method and the entry's kernels estimate without error, LoRA below full."""
    shape, arch = ModelShape.from_hf_config(tiny(model_type)), REGISTRY[model_type]
    for attention in arch.attention_kernels:
        specs = {m: arch.runnable_spec(RunSpec(method=m, attention=attention, seq=64))
                 for m in ("full", "lora", "qlora")}
        peaks = {m: estimate_memory(shape, spec).peak_bytes for m, spec in specs.items()}
        assert 0 < peaks["lora"] < peaks["full"], (model_type, attention, peaks)


# ---- every entry --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_parameters_equal_transformers_on_the_meta_device(model_type: str) -> None:
    check_parameters(tiny(model_type))
    check_parameters(flipped(model_type))


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_lora_trainable_params_equal_peft(model_type: str) -> None:
    arch = REGISTRY[model_type]
    # PEFT's default list (checked below against PEFT's table), named as memfit.measure passes it: PEFT 0.21.2
    # with target_modules=None fails on transformers 5's Mixtral (its MoE config conversion drops the lookup)
    default = arch.lora_targets or tuple(arch.lora_hint.split(","))
    check_lora(tiny(model_type), default)
    check_lora(tiny(model_type), ("all-linear",))


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_module_names_equal_named_modules(model_type: str) -> None:
    check_module_names(tiny(model_type))


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_config_defaults_are_the_config_class_defaults(model_type: str) -> None:
    check_config_defaults(REGISTRY[model_type])


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_attention_kernels_and_peft_targets(model_type: str) -> None:
    check_attention_kernels(REGISTRY[model_type])
    check_peft_targets(REGISTRY[model_type])


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_every_entry_estimates(model_type: str) -> None:
    check_estimates(model_type)


def test_source_is_an_installed_modeling_file() -> None:
    transformers = pytest.importorskip("transformers")
    root = Path(transformers.__file__).parent
    for arch in REGISTRY.values():
        path = arch.source.split(" ")[0]
        assert (root.parent / path).is_file(), arch.source
        assert "5.24.0" in arch.source


def test_activation_default_is_the_architectures_own() -> None:
    """A config that names no activation gets transformers' default for its architecture: GPT-2 ``gelu_new``
    (4 saved tensors per MLP), OPT ``relu`` (saves its output, which fc2 saves anyway), GPT-NeoX ``gelu``;
    before the registry every architecture defaulted to silu. Worked for OPT at b=2, s=32, i=96, fp32, full:
    silu keeps the fc1 output (mlp/act) and its own output (fc2's input, mlp/down), 2 x 2*32*96*4 = 49,152 B
    per block; relu keeps one tensor that is both, 24,576 B."""
    assert ModelShape.from_hf_config(tiny("gpt2")).activation == "gelu_new"
    assert ModelShape.from_hf_config(tiny("opt")).activation == "relu"
    assert ModelShape.from_hf_config(tiny("gpt_neox")).activation == "gelu"
    assert ModelShape.from_hf_config(tiny("llama")).activation == "silu"
    spec = RunSpec(method="full", precision="fp32", batch=2, seq=32, device="cpu", attention="sdpa")
    relu = estimate_memory(ModelShape.from_hf_config(tiny("opt", dropout=0.0)), spec).activations.by_component
    silu = estimate_memory(ModelShape.from_hf_config(tiny("opt", dropout=0.0, activation_function="silu")),
                           spec).activations.by_component
    assert (relu["mlp/act"], relu.get("mlp/down", 0)) == (24_576, 0)
    assert (silu["mlp/act"], silu["mlp/down"]) == (24_576, 24_576)


def test_no_model_type_comparison_outside_the_registry() -> None:
    """Architecture facts live in memfit.estimate.arch: no other source file compares model_type names."""
    pattern = re.compile(r"model_type (==|!=|in|not in) ")
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if "estimate/arch" not in p.as_posix()
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_phi_lm_head_bias_is_counted_and_copied_by_modules_to_save() -> None:
    """Phi's lm_head has a bias (V parameters) that stays when the weight is tied, and PEFT's modules_to_save copy
    of lm_head trains it: LoRA q/v rank 8 (v_proj: 2 kv heads of 16) + the copy = 2 layers x (8*(64+64) +
    8*(64+32)) + (300*64 + 300) = 3,584 + 19,500 = 23,084, as PEFT counts."""
    peft = pytest.importorskip("peft")
    for tied in (False, True):
        config = tiny("phi", tie_word_embeddings=tied)
        check_parameters(config)
    config = tiny("phi")
    spec = RunSpec(method="lora", rank=8, targets=("q_proj", "v_proj"), modules_to_save=("lm_head",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = peft.get_peft_model(_meta_model(config), peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"],
                                                                      modules_to_save=["lm_head"],
                                                                      task_type="CAUSAL_LM"))
    real = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == real == 23_084


# ---- a new architecture is one entry ------------------------------------------------------------------------

@pytest.mark.slow
def test_olmo2_is_a_flag_combination_checked_against_real_steps() -> None:
    """OLMo 2 (issue 13) is one registry entry of flags that existed before it (no pre-norms, post-attention and
    post-MLP norms, q/k norms over the full width, the norm weight before the cast): the parametrised checks
    above take it, and here the estimate meets two real CPU training steps (LoRA fp32 sdpa, full bf16 eager)."""
    torch = pytest.importorskip("torch")
    from memfit.estimate.arch.registry import OLMO2

    assert REGISTRY["olmo2"] is OLMO2
    config = tiny("olmo2")
    from memfit.validate.steps import real_steps

    torch.set_num_threads(1)
    for spec in (RunSpec(method="lora", precision="fp32", batch=2, seq=32, device="cpu", targets=("q_proj", "v_proj")),
                 RunSpec(method="full", precision="bf16", batch=2, seq=32, device="cpu", attention="eager")):
        measured = real_steps(config, spec, steps=2)
        est = estimate_memory(ModelShape.from_hf_config(config), spec)
        assert est.peak_bytes == pytest.approx(measured.peak_bytes, rel=0.02)
        assert est.activation_bytes == pytest.approx(measured.saved_bytes, rel=0.02)


# ---- issue 13 (second half): what the registry-wide checks above do not flip ---------------------------------

def test_falcon_variants_count_as_transformers_builds_them() -> None:
    """Falcon's config switches the registry-wide ``flipped`` config leaves alone: multi_query off (as many
    key/value heads as heads: query_key_value is 3h wide, not h + 2d) with a serial block (its own
    post_attention_layernorm) and biases; the parameters and module names equal the meta model's."""
    config = tiny("falcon", multi_query=False, parallel_attn=False, bias=True)
    shape = ModelShape.from_hf_config(config)
    assert (shape.n_kv_heads, shape.linears()[0].out_features) == (4, 3 * 64)
    check_parameters(config)
    check_module_names(config)
    check_lora(config, ("all-linear",))


def test_falcon_40b_decoder_and_alibi_are_refused_by_the_estimate_only() -> None:
    """new_decoder_architecture (Falcon-40B: grouped kv heads, ln_attn / ln_mlp) and alibi are not modelled: the
    estimate says so and names trace / measure; the shared config boundary lets trace and measure run them."""
    from memfit.errors import MemfitError
    from memfit.estimate.shape import validate_config

    for key in ("new_decoder_architecture", "alibi"):
        config = tiny("falcon", **{key: True})
        with pytest.raises(MemfitError, match=f"{key}: true selects .*memfit trace"):
            ModelShape.from_hf_config(config)
        validate_config(config)
