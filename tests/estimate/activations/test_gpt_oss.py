"""GPT-OSS's block pieces (``transformers/models/gpt_oss/modeling_gpt_oss.py``, 5.24.0), worked by hand: the eager
attention with sinks, and the sparse MoE with a top-k-then-softmax router, biased experts and a clamped SwiGLU.

b=1, s=8 (T=8), h=16, a=2 heads, k=1 kv head, d=8, i=32, E=4 experts, 2 per token: Tk = 16 routed rows; bf16 = 2 B,
fp32 = 4 B, int64 = 8 B. LoRA on q_proj, v_proj (PEFT has no default for gpt_oss), on CUDA.
"""

from __future__ import annotations

from activation_cases import LLAMA, by_component, hidden, model, replay

from memfit.estimate.activations import ops
from memfit.estimate.activations.moe import moe_mlp
from memfit.estimate.lora import block_linears_by_role

GPT_OSS = {**LLAMA, "model_type": "gpt_oss", "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
           "layer_types": ["sliding_attention", "full_attention"]}
QV = ("q_proj", "v_proj")


def _attention(**spec: object) -> dict[str, int]:
    rp = replay(model(GPT_OSS), attention="eager", targets=QV, **spec)
    t, itemsize = rp.tape, 2
    q = t.new((1, 2, 8, 8), itemsize, True)
    k, v = t.new((1, 1, 8, 8), itemsize, True), t.new((1, 1, 8, 8), itemsize, True)
    out = ops.attention(rp, q, k, v)
    assert out.shape == (1, 8, 16)
    return by_component(t.saved)


def test_eager_attention_with_sinks_saves_1184_bytes() -> None:
    """bf16: repeat_kv copies k and v to (1, 2, 8, 8), 256 B each.

    ===========================  ===========================================================================  =====
    op                           saved                                                                        bytes
    ===========================  ===========================================================================  =====
    q @ k^T                      q 256 + k's copy 256                                                           512
    cat(scores, sinks), - max    the max's indices (1, 2, 8, 1) int64                                           128
    softmax (the scores' dtype)  its output (1, 2, 8, 9) bf16: the sink column included                         288
    probs[..., :-1] @ v          the view keeps the softmax output (saved already); v's copy 256               256
    ===========================  ===========================================================================  =====

    1,184 B; without the sink (Llama's eager) the softmax output is (1, 2, 8, 8) fp32 512 B, cast to bf16 (256 B)
    for p @ v, and there are no indices.
    """
    saved = _attention()
    assert saved == {"attention/qk": 512, "attention/scores": 416, "attention/pv": 256}


def test_eager_attention_with_sinks_under_autocast_softmaxes_in_fp32() -> None:
    """mixed-bf16: the fp32 causal mask is added to the bf16 scores, so the (1, 2, 8, 9) logits and the softmax
    output are fp32, 576 B; ``probs[..., :-1].to(v.dtype)`` is a bf16 copy (1, 2, 8, 8), 256 B, which p @ v keeps."""
    saved = _attention(precision="mixed-bf16")
    assert saved["attention/scores"] == 128 + 576
    assert saved["attention/pv"] == 256 + 256


def test_moe_with_frozen_experts_saves_7232_bytes() -> None:
    """bf16 (torch._grouped_mm), experts frozen, input x (1, 8, 16) requiring grad:

    ================  =================================================================================  =====
    what              saved                                                                              bytes
    ================  =================================================================================  =====
    router            topk of the (8, 4) logits: indices (16,) int64 128; softmax over the k: (16,) bf16    160
    dispatch          sorted token ids and expert offsets 2 x 128, the inverse order 128                    384
    clamped SwiGLU    gate_up output (16, 64) bf16 2,048 (both clamps' input); sigmoid (16, 32) 1,024 and
                      the clamped gate 1,024 (their product)                                               4096
    (up + 1) * glu    up + 1 and the glu, (16, 32) bf16 each                                               2048
    x routing w       the weights (16, 1) bf16 32 and the expert output (16, 16) bf16 512                   544
    ================  =================================================================================  =====

    7,232 B, where Mixtral's router and SwiGLU keep 4,384 B (test_moe.py). A real step of a tiny GPT-OSS (h=64,
    i=128, E=4, bf16, full and LoRA all-linear) saves what the estimate replays to within 0.01%.
    """
    rp = replay(model(GPT_OSS), targets=QV)
    out = moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    saved = by_component(rp.tape.saved)
    assert saved == {"moe/router": 160, "moe/dispatch": 384, "moe/act": 4096, "moe/mul": 2048, "moe/weights": 544}
    assert out.shape == (1, 8, 16)
