"""One decoder block's saved bytes, worked by hand op by op, on two layouts.

b=1, s=8 (T=8), h=16, a=2 heads of d=8; bf16 = 2 B, fp32 = 4 B.
"""

from __future__ import annotations

from activation_cases import GPT2, by_component, hidden, model, replay

from memfit.estimate.activations.block import block_forward
from memfit.estimate.activations.embedding import rotary_tables


def test_llama_block_lora_bf16_saves_4736_bytes() -> None:
    """Llama, k=1 kv head, i=32, LoRA rank 4 on q_proj and v_proj, bf16, sdpa on CUDA; the block's input
    x (1, 8, 16) bf16 requires grad (a block after the first):

    ============================  =============================================================  =======
    op                            saved                                                          bytes
    ============================  =============================================================  =======
    input_layernorm               x.float() 8*16*4 + rsqrt (1, 8, 1) fp32 8*4                      544
    q_proj + LoRA                 PEFT's fp32 copy of the normed x 512 + lora_A out 8*4*4 128      640
    k_proj (frozen)               nothing (weight needs no grad; its copy is a parameter)            0
    v_proj + LoRA                 its own fp32 copy 512 + 128                                      640
    rope on q, k                  cos, sin (1, 8, 8) bf16, 128 each: shared by every block        (256)
    sdpa                          q (1,2,8,8) 256, k (1,1,8,8) 128, v 128, out 256, lse 2*8*4 64   832
    o_proj (frozen)               nothing                                                            0
    post_attention_layernorm      512 + 32                                                         544
    gate_proj, act (silu)         the gate output (1, 8, 32) bf16                                  512
    up_proj, act * up             both factors, 512 + 512                                         1024
    down_proj (frozen)            nothing                                                            0
    ============================  =============================================================  =======

    4,736 B for the block (and the 256 B of cos/sin, counted once for the model).
    """
    rp = replay(model())
    rope = rotary_tables(rp)
    assert rope is not None
    out = block_forward(rp, hidden(rp), rope)
    saved = by_component(rp.tape.saved)
    assert saved.pop("attention/rope") == 256
    assert saved == {"norm": 1088, "lora/A": 1024, "lora/B": 256, "attention/kernel": 832, "mlp/act": 512,
                     "mlp/mul": 1024}
    assert sum(saved.values()) == 4736
    assert (out.shape, out.itemsize, out.requires_grad) == ((1, 8, 16), 2, True)


def test_gpt2_block_full_fp32_eager_saves_14976_bytes() -> None:
    """GPT-2 (LayerNorm, fused c_attn, learned positions, gelu_new, i = 4h = 64), full fine-tune in fp32, eager
    attention, dropout off; input x (1, 8, 16) fp32 requiring grad:

    ============================  =============================================================  =======
    op                            saved                                                          bytes
    ============================  =============================================================  =======
    ln_1                          x 8*16*4 + mean and rstd (1, 8, 1) fp32, 32 each                 576
    c_attn (16 -> 48)             its input, 512                                                   512
    q @ k^T                       q and k: transposed views of c_attn's output, copied for bmm,
                                  (1, 2, 8, 8) fp32 = 512 each                                    1024
    softmax                       its output in the scores' dtype (fp32), 2*8*8*4                  512
    p @ v                         v's copy, 512 (p is saved already)                               512
    c_proj                        its input (1, 8, 16) fp32                                        512
    ln_2                          576                                                              576
    c_fc (16 -> 64)               its input, 512                                                   512
    gelu_new                      x, tanh(.), 0.5x, 1 + tanh(.): 4 x (1, 8, 64) fp32 = 4 x 2048   8192
    mlp.c_proj (64 -> 16)         its input, 2048                                                 2048
    ============================  =============================================================  =======

    14,976 B.
    """
    rp = replay(model(GPT2), method="full", precision="fp32", attention="eager")
    block_forward(rp, hidden(rp), None)
    saved = by_component(rp.tape.saved)
    assert saved == {"norm": 1152, "attention/qkv": 512, "attention/qk": 1024, "attention/scores": 512,
                     "attention/pv": 512, "attention/out": 512, "mlp/up": 512, "mlp/act": 8192, "mlp/down": 2048}
    assert sum(saved.values()) == 14976


def test_the_first_block_of_a_lora_run_saves_less() -> None:
    """Block 0 of the Llama LoRA run above: its input (the frozen embedding's output) does not require grad, so
    the first norm saves nothing (544 B less) and the q/v adapters are the first ops that require grad; every
    op after them is as in a later block: 4,736 - 544 = 4,192 B."""
    rp = replay(model())
    block_forward(rp, hidden(rp, requires_grad=False), rotary_tables(rp))
    saved = by_component(rp.tape.saved)
    saved.pop("attention/rope")
    assert sum(saved.values()) == 4192 and saved["norm"] == 544
