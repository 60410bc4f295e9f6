"""LoRA trainable parameter counts equal PEFT's, on the meta device (no memory, no download)."""

from __future__ import annotations

import pytest

from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

CASES = [
    ("llama-3.2-1b", ()),
    ("llama-3.2-1b", ("all-linear",)),
    ("llama-3.2-1b", ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    ("qwen2.5-0.5b", ("all-linear",)),
    ("gpt2", ()),
    ("gpt2", ("all-linear",)),
    ("phi-3-mini", ("qkv_proj", "o_proj")),
    ("phi-3-mini", ("all-linear",)),
    ("gemma-2-2b", ("q_proj", "v_proj")),
    ("opt-1.3b", ("all-linear",)),
    ("mixtral-8x7b", ("q_proj", "v_proj")),
    ("mixtral-8x7b", ("all-linear",)),  # PEFT adapts the router and the fused 3-D experts too
]


def _peft_count(config: dict, targets: tuple[str, ...], rank: int) -> int:
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for k in ("torch_dtype", "dtype"):
        cfg.pop(k, None)
    hf = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")
    tm = None if not targets else ("all-linear" if targets == ("all-linear",) else list(targets))
    pm = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=tm, task_type="CAUSAL_LM"))
    return sum(p.numel() for p in pm.parameters() if p.requires_grad)


@pytest.mark.parametrize("name,targets", CASES, ids=[f"{n}-{'+'.join(t) or 'default'}" for n, t in CASES])
def test_lora_trainable_params_equal_peft(name: str, targets: tuple[str, ...]) -> None:
    config = _two_layers(name)  # counts scale with layers; 2 keeps model construction fast
    shape = ModelShape.from_hf_config(config)
    spec = RunSpec(method="lora", rank=8, targets=targets)
    assert lora_trainable_params(shape, spec) == _peft_count(config, targets, 8)


# ---- --modules-to-save: PEFT's own name matching, per architecture (issue 21 #6) -------------------------

from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.arch import REGISTRY  # noqa: E402
from memfit.estimate.lora import module_names  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402


def _meta_model(config: dict) -> object:
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for k in ("torch_dtype", "dtype"):
        cfg.pop(k, None)
    hf = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")


def _two_layers(name: str) -> dict:
    entry = lookup(name)
    return {**entry.config, entry.shape.arch.keys.layers[0]: 2}


MODULE_TREES = [(n, _two_layers(n)) for n in ("gpt2", "opt-1.3b", "pythia-1.4b", "llama-3.2-1b", "mistral-7b",
                                              "mixtral-8x7b", "qwen2.5-0.5b", "qwen3-8b", "gemma-2-2b", "phi-3-mini")]
MODULE_TREES += [("opt-projected", tiny_config("opt", layers=2, ffn_dim=128, word_embed_proj_dim=32)),
                 ("opt-post-norm", tiny_config("opt", layers=2, ffn_dim=128, do_layer_norm_before=False)),
                 ("gemma", tiny_config("gemma", layers=2, head_dim=16))]
MODULE_TREES += [(n, _two_layers(n)) for n in ("olmo-2-7b", "phi-2", "granite-3.3-8b", "gemma-3-1b")]  # issue 13
MODULE_TREES += [(n, _two_layers(n)) for n in ("falcon-7b", "qwen3-30b-a3b")]
MODULE_TREES += [("gpt-oss-20b", {**_two_layers("gpt-oss-20b"),
                                  "layer_types": ["sliding_attention", "full_attention"]})]
MODULE_TREES += [(n, _two_layers(n)) for n in ("moonlight-16b-a3b",)]  # layer 0 a dense MLP, layer 1 MoE + shared


@pytest.mark.parametrize(("name", "config"), MODULE_TREES, ids=[n for n, _ in MODULE_TREES])
def test_module_names_are_those_of_the_real_model(name: str, config: dict) -> None:
    """The names PEFT matches --modules-to-save against: equal to named_modules() of the model transformers builds."""
    real = {k for k, _ in _meta_model(config).named_modules(remove_duplicate=False) if k}
    assert set(module_names(ModelShape.from_hf_config(config))) == real


def test_module_trees_cover_every_architecture() -> None:
    types = {ModelShape.from_hf_config(c).model_type for _, c in MODULE_TREES}
    assert types == set(REGISTRY)


SAVE_CASES = [
    ("gpt2", ("wte",)),  # GPT-2's real name (refused before); tied to lm_head
    ("gpt2", ("wte", "lm_head")),
    ("gpt2", ("transformer.wte",)),
    ("gpt2", ("head",)),  # PEFT matches plain suffixes: "head" is lm_head
    ("opt-1.3b", ("embed_tokens", "lm_head")),  # under model.decoder
    ("pythia-1.4b", ("embed_in", "lm_head")),  # transformers 5 names GPT-NeoX's output layer lm_head
    ("llama-3.2-1b", ("embed_tokens", "lm_head")),  # tied embeddings: two copies
    ("qwen2.5-0.5b", ("lm_head",)),
    ("phi-2", ("lm_head",)),  # issue 13: lm_head has a bias, which PEFT's copy trains too
]


def _peft_trainable(config: dict, modules_to_save: tuple[str, ...], rank: int) -> int:
    pm = peft.get_peft_model(_meta_model(config), peft.LoraConfig(
        r=rank, target_modules=None, modules_to_save=list(modules_to_save), task_type="CAUSAL_LM"))
    return sum(p.numel() for p in pm.parameters() if p.requires_grad)


@pytest.mark.parametrize(("name", "saved"), SAVE_CASES, ids=[f"{n}-{'+'.join(s)}" for n, s in SAVE_CASES])
def test_modules_to_save_trainable_params_equal_peft(name: str, saved: tuple[str, ...]) -> None:
    config = _two_layers(name)
    spec = RunSpec(method="lora", rank=8, modules_to_save=saved)
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == _peft_trainable(config, saved, 8)


def test_a_name_no_module_has_is_an_error() -> None:
    """gpt2 has no embed_tokens: PEFT wraps nothing (its trainable count stays the adapter's), the estimate used to
    count a 38.6M-parameter copy. Now an error naming the architecture's real modules."""
    config = _two_layers("gpt2")
    spec = RunSpec(method="lora", rank=8, modules_to_save=("embed_tokens",))
    assert _peft_trainable(config, ("embed_tokens",), 8) == _peft_trainable(config, (), 8)  # PEFT: silently none
    with pytest.raises(MemfitError, match=r"embed_tokens matches no module of this gpt2 model.*transformer\.wte"):
        lora_trainable_params(ModelShape.from_hf_config(config), spec)


def test_a_module_the_estimate_does_not_model_points_to_trace() -> None:
    shape = ModelShape.from_hf_config(_two_layers("gpt2"))
    with pytest.raises(MemfitError, match="transformer.ln_f: memfit estimate models trained copies of "
                                          "transformer.wte and lm_head only.*memfit trace"):
        lora_trainable_params(shape, RunSpec(method="lora", modules_to_save=("ln_f",)))
