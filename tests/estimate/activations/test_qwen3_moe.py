"""Qwen3-MoE's sparse block (``transformers/models/qwen3_moe/modeling_qwen3_moe.py``, 5.24.0) against Mixtral's, worked
by hand, and the eager per-expert loop under autocast (both architectures).

b=1, s=8 (T=8), h=16, i=32, E=4 experts, k=2 per token: Tk = 16 routed rows; bf16 = 2 B, fp32 = 4 B, int64 = 8 B.
"""

from __future__ import annotations

from activation_cases import LLAMA, by_component, hidden, model, replay

from memfit.estimate.activations.moe import moe_mlp
from memfit.estimate.lora import block_linears_by_role

MIXTRAL = {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
QWEN3_MOE = {**LLAMA, "model_type": "qwen3_moe", "moe_intermediate_size": 32, "num_experts": 4,
             "num_experts_per_tok": 2}


def _saved(config: dict[str, object], **spec: object) -> dict[str, int]:
    rp = replay(model(config), **{"targets": ("q_proj", "v_proj"), **spec})  # PEFT has no default for qwen3_moe
    moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    return by_component(rp.tape.saved)


def test_qwen3_moe_router_without_renormalisation_saves_only_the_indices() -> None:
    """norm_topk_prob false (Qwen3MoeConfig's default): no division by the weights' sum, so the router keeps the
    softmax output (1, 8, 4) fp32 128 B and the top-k indices (16,) int64 128 B: 256 B, where Mixtral's 352 B add
    the sum (8, 1) fp32 32 B and the weights (16,) fp32 64 B. The weights are then cast back to the logits' dtype
    (bf16): the routing multiply keeps (16, 1) bf16 32 B and the expert output (16, 16) bf16 512 B, 544 B (Mixtral's
    fp32 weights: 576 B). With norm_topk_prob true the router is Mixtral's again."""
    mixtral, qwen = _saved(MIXTRAL), _saved(QWEN3_MOE)
    assert (mixtral["moe/router"], qwen["moe/router"]) == (352, 256)
    assert (mixtral["moe/weights"], qwen["moe/weights"]) == (576, 544)
    assert _saved({**QWEN3_MOE, "norm_topk_prob": True})["moe/router"] == 352


def test_eager_loop_under_autocast_keeps_one_weight_copy_per_expert() -> None:
    """mixed-bf16, LoRA on q/v (experts frozen, x requiring grad): the eager loop's ``F.linear(rows, W[e])`` casts
    each expert's weight to bf16 and keeps that copy for the rows' gradient: 4 copies of gate_up (64, 16) bf16,
    2,048 B each, 8,192 B, and of down (16, 32), 1,024 B each, 4,096 B, where one of each was counted before (a
    real step of a tiny Mixtral / Qwen3-MoE, h=64, i=128, E=4, b1 s32, saved 37% more than that estimate)."""
    for config in (MIXTRAL, QWEN3_MOE):
        saved = _saved(config, precision="mixed-bf16", device="cpu")
        assert (saved["moe/gate_up/weight_copy"], saved["moe/down/weight_copy"]) == (8192, 4096)
