"""PEFT itself on the meta device: the independent source the estimate's LoRA counts are checked against. A
catalogue config cut to two layers, built by transformers' ``AutoModelForCausalLM.from_config`` on meta (no
memory), adapted by ``peft.get_peft_model``, trainable parameters counted."""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import lookup


def two_layers(name: str) -> dict[str, Any]:
    """The catalogue config of ``name`` with two decoder layers."""
    entry = lookup(name)
    return {**entry.config, entry.shape.arch.keys.layers[0]: 2}


def peft_targets(targets: tuple[str, ...]) -> str | list[str] | None:
    """memfit's ``targets`` as ``LoraConfig.target_modules``: empty = PEFT's default, all-linear as PEFT spells it."""
    if not targets:
        return None
    return "all-linear" if targets == ("all-linear",) else list(targets)


def peft_trainable(config: dict[str, Any], **lora: Any) -> int:
    """Trainable parameters PEFT gives the model ``config`` describes under ``LoraConfig(**lora)``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for k in ("torch_dtype", "dtype"):
        cfg.pop(k, None)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **cfg),
                                                              attn_implementation="eager")
    pm = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", **lora))
    return sum(p.numel() for p in pm.parameters() if p.requires_grad)
