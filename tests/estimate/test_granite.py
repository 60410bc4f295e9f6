"""Granite (issue 13): Llama's block with µP scalar multipliers, against real CPU steps of the same sizes as Llama."""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import ModelShape, RunSpec, estimate_memory


def _config(model_type: str) -> dict[str, Any]:
    multipliers = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
                   "logits_scaling": 16.0} if model_type == "granite" else {}
    return {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "max_position_embeddings": 256,
            "pad_token_id": 0, **multipliers}


@pytest.mark.slow
def test_granite_costs_what_llama_costs_but_the_embedding_leaf_under_lora_checkpointing() -> None:
    """The multipliers (embedding, residual, logits) each make a new tensor that saves nothing: without
    checkpointing Granite's step peaks where Llama's of the same sizes does. With LoRA and checkpointing, PEFT's
    enable_input_require_grads() makes the frozen embedding's output a leaf that requires grad; Llama's first
    checkpoint is that tensor, Granite's is its product with embedding_multiplier, and the leaf stays referenced by
    the graph to the end of the backward: b*s*h*4 = 4*64*64*4 = 65,536 B more, measured and estimated."""
    torch = pytest.importorskip("torch")
    from memfit.validate.steps import real_steps

    torch.set_num_threads(1)
    for checkpointing, extra in (("none", 0), ("full", 65_536)):
        spec = RunSpec(method="lora", precision="fp32", batch=4, seq=64, device="cpu", attention="sdpa",
                       checkpointing=checkpointing, targets=("q_proj", "v_proj"))
        real = {t: real_steps(_config(t), spec, steps=2).peak_bytes for t in ("llama", "granite")}
        est = {t: estimate_memory(ModelShape.from_hf_config(_config(t)), spec).peak_bytes for t in ("llama", "granite")}
        assert real["granite"] - real["llama"] == extra, checkpointing
        assert est["granite"] - est["llama"] == extra, checkpointing
