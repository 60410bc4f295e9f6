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
    config = dict(lookup(name).config)
    config["num_hidden_layers"] = 2  # counts scale with layers; 2 keeps model construction fast
    config.pop("n_layer", None)
    if config["model_type"] == "gpt2":
        config["n_layer"] = 2
    shape = ModelShape.from_hf_config(config)
    spec = RunSpec(method="lora", rank=8, targets=targets)
    assert lora_trainable_params(shape, spec) == _peft_count(config, targets, 8)
