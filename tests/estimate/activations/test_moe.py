"""The mixture-of-experts MLP's saved bytes, worked by hand: Mixtral's router and experts, plain and with
PEFT's ParamWrapper adapters (``--targets all-linear``).

b=1, s=8 (T=8), h=16, i=32, E=4 experts, k=2 per token: Tk = 16 routed rows; bf16 = 2 B, fp32 = 4 B, int64 = 8 B.
"""

from __future__ import annotations

from activation_cases import LLAMA, by_component, hidden, model, replay

from memfit.estimate.activations.moe import moe_mlp
from memfit.estimate.lora import block_linears_by_role

MIXTRAL = {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}


def test_moe_with_frozen_experts_saves_4384_bytes() -> None:
    """LoRA on q/v only (router and experts frozen), bf16, input x (1, 8, 16) requiring grad:

    ===============  ====================================================================================  =====
    what             saved                                                                                 bytes
    ===============  ====================================================================================  =====
    router           softmax output (1, 8, 4) fp32 128; top-k indices (16,) int64 128; the k weights'
                     sum (8, 1) fp32 32 and the weights (16,) fp32 64                                       352
    dispatch         sorted token ids and expert offsets, 2 x (16,) int64 = 256; the inverse order 128      384
    gate_up, act     the gathered rows' gate_up output (16, 64) bf16, whole (gate is a view of it)        2048
    act(gate) * up   act(gate) (16, 32) bf16 (up is a view of the saved storage)                         1024
    x routing w      the routing weights (16, 1) fp32 64 and the expert output (16, 16) bf16 512           576
    ===============  ====================================================================================  =====

    4,384 B.
    """
    rp = replay(model(MIXTRAL))
    out = moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    assert by_component(rp.tape.saved) == {"moe/router": 352, "moe/dispatch": 384, "moe/act": 2048, "moe/mul": 1024,
                                           "moe/weights": 576}
    assert out.shape == (1, 8, 16)


def test_moe_eager_loop_keeps_each_index_add_source() -> None:
    """fp32 (transformers' eager per-expert loop; ``torch._grouped_mm`` takes bf16 only), LoRA on q/v, so the
    experts are frozen and x requires grad. The loop's ``final.index_add_(0, token_idx, out)`` saves its source:

    ===============  ====================================================================================  =====
    what             saved                                                                                 bytes
    ===============  ====================================================================================  =====
    router           softmax (1, 8, 4) fp32 128; indices (16,) int64 128; sum (8, 1) 32; weights (16,) 64    352
    dispatch         token ids and top-k positions from torch.where, 2 x (16,) int64 = 256; index_add's
                     source (16, 16) fp32 1,024                                                            1280
    gate_up, act     gate_up output (16, 64) fp32                                                          4096
    act(gate) * up   act(gate) (16, 32) fp32                                                               2048
    x routing w      the routing weights (16, 1) fp32 64 and the expert output (16, 16) fp32 1,024         1088
    ===============  ====================================================================================  =====

    8,864 B (a real fp32 step of a 2-layer, h=64, i=128, 4-expert Mixtral at b1 s32 saved 15,872 B per block
    more than the grouped-path replay before this was modelled).
    """
    rp = replay(model(MIXTRAL), precision="fp32")
    moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    saved = by_component(rp.tape.saved)
    assert saved == {"moe/router": 352, "moe/dispatch": 1280, "moe/act": 4096, "moe/mul": 2048, "moe/weights": 1088}
    assert sum(saved.values()) == 8864


def test_moe_with_adapted_experts_keeps_the_effective_weights() -> None:
    """``all-linear``, rank 4, bf16: PEFT adapts the router (one 2-D parameter, rank 4) and the two fused expert
    parameters (rank r*E = 16 for down, 2*r*E = 32 for gate_up), through ``ParamWrapper``:

    - router: W_eff (4, 16) bf16 = 128 B kept by the linear (now requiring grad), which also keeps x
      (1, 8, 16) bf16, 256 B; then the router's own 352 B: moe/router 608, its effective weight 128;
    - gate_up: the bf16 copies of the adapter factors baddbmm saves, (64, 32) + (32, 16) = 2,560 elements,
      5,120 B; W_eff (4, 64, 16) bf16, 8,192 B, and the gathered rows (16, 16), 512 B, kept by the matmul;
    - act and mul as with frozen experts, 2,048 + 1,024 B;
    - down: factors (16, 16) + (16, 32) = 768 elements, 1,536 B; W_eff (4, 16, 32), 4,096 B; its input rows
      (16, 32), 1,024 B;
    - routing weights 576 B, dispatch 384 B.

    25,248 B.
    """
    rp = replay(model(MIXTRAL), targets=("all-linear",))
    moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    saved = by_component(rp.tape.saved)
    assert saved == {"moe/router": 608, "moe/router/effective_weight": 128, "moe/dispatch": 384,
                     "moe/gate_up/lora_factors": 5120, "moe/gate_up": 512, "moe/gate_up/effective_weight": 8192,
                     "moe/act": 2048, "moe/mul": 1024, "moe/down/lora_factors": 1536, "moe/down": 1024,
                     "moe/down/effective_weight": 4096, "moe/weights": 576}
    assert sum(saved.values()) == 25248


def test_fp32_adapter_factors_are_views_of_the_adapters() -> None:
    """In fp32 the factors baddbmm saves are views of the fp32 adapters themselves (parameters): no
    moe/*/lora_factors bytes."""
    rp = replay(model(MIXTRAL), targets=("all-linear",), precision="fp32")
    moe_mlp(rp, hidden(rp), block_linears_by_role(rp.model))
    assert not any(k.endswith("lora_factors") for k in by_component(rp.tape.saved))
