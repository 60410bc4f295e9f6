"""Each op's saved bytes for one small shape, worked by hand from PyTorch's and PEFT's rules.

Shapes: b=1, s=8 (T=8 tokens), h=16, a=2 heads of d=8, k=1 kv head, i=32; LoRA rank 4. bf16 = 2 B, fp32 = 4 B.
"""

from __future__ import annotations

from activation_cases import GEMMA, GPT2, by_component, hidden, model, replay, with_layout

from memfit.estimate.activations import ops
from memfit.estimate.lora import block_linears_by_role


def test_frozen_linear_with_lora_saves_peft_s_fp32_copy_and_the_rank_wide_output() -> None:
    """q_proj (16 -> 16) frozen in bf16 with a LoRA adapter, input x (1, 8, 16) bf16 not requiring grad (block 0).
    The base linear saves nothing (its weight needs no gradient, x needs none). PEFT casts x to fp32, a new
    1*8*16*4 = 512 B tensor that lora_A saves; lora_A's output (1, 8, 4) fp32, 8*4*4 = 128 B, is what lora_B
    saves: 640 B."""
    rp = replay(model())
    lin = block_linears_by_role(rp.model)["q"]
    out = ops.linear(rp, hidden(rp, requires_grad=False), lin, "attention/q")
    assert by_component(rp.tape.saved) == {"lora/A": 512, "lora/B": 128}
    assert (out.shape, out.itemsize, out.requires_grad) == ((1, 8, 16), 2, True)


def test_trained_linear_saves_its_input() -> None:
    """Full fine-tune, fp32: k_proj (16 -> 8) saves its input x (1, 8, 16), 512 B; the weight is a parameter."""
    rp = replay(model(), method="full", precision="fp32")
    ops.linear(rp, hidden(rp), block_linears_by_role(rp.model)["k"], "attention/k")
    assert by_component(rp.tape.saved) == {"attention/k": 512}


def test_qlora_linear_keeps_nothing_for_the_4bit_weight() -> None:
    """QLoRA: bitsandbytes keeps only the packed 4-bit weight (a parameter); the adapter saves as in LoRA, on
    the fp32 residual stream (prepare_model_for_kbit_training): x (1, 8, 16) fp32 is already fp32, so lora_A
    saves x itself, 512 B, and lora_B its 128 B input. k_proj, not adapted, saves nothing."""
    rp = replay(model(), method="qlora")
    lins = block_linears_by_role(rp.model)
    x = hidden(rp)
    ops.linear(rp, x, lins["k"], "attention/k")
    assert rp.tape.saved_total == 0
    ops.linear(rp, x, lins["q"], "attention/q")
    assert by_component(rp.tape.saved) == {"lora/A": 512, "lora/B": 128}


def test_rmsnorm_saves_the_fp32_input_and_rstd() -> None:
    """x (1, 8, 16) bf16 requiring grad. LoRA (weight frozen): x.float() 8*16*4 = 512 B and rsqrt (1, 8, 1) fp32
    32 B: 544 B. Full fine-tune: the weight multiplies the cast y (1, 8, 16) bf16 and saves it, 256 B more: 800 B.
    OLMo 2 (``before_cast``) multiplies the fp32 y instead: 544 + 512 = 1,056 B. Gemma (``one_plus_before_cast``,
    LoRA): y32 * (1 + w.float()) saves the fresh (16,) fp32 1 + w, 64 B: 608 B."""
    for shape, method, expected in ((model(), "lora", 544), (model(), "full", 800),
                                    (with_layout(model(), norm_weight="before_cast"), "full", 1056),
                                    (model(GEMMA), "lora", 608)):
        rp = replay(shape, method=method)
        ops.rmsnorm(rp, hidden(rp), "norm")
        assert rp.tape.saved_total == expected, (shape.layout.norm_weight, method)


def test_layernorm_saves_input_mean_and_rstd() -> None:
    """x (1, 8, 16) requiring grad: x, and mean and rstd per row (1, 8, 1). fp32: 512 + 32 + 32 = 576 B. bf16 on
    CPU: the statistics in bf16, 256 + 16 + 16 = 288 B; on CUDA in fp32: 256 + 32 + 32 = 320 B."""
    for precision, device, expected in (("fp32", "cpu", 576), ("bf16", "cpu", 288), ("bf16", "cuda", 320)):
        rp = replay(model(GPT2), method="full", precision=precision, device=device)
        ops.layernorm(rp, hidden(rp), "norm")
        assert rp.tape.saved_total == expected, (precision, device)


def test_activations() -> None:
    """On (1, 8, 32) bf16 = 512 B: silu saves its input (512 B); relu its output (512 B); gelu_new, written out
    in Python, its input, tanh's output and the two factors of the last product: 4 x 512 = 2,048 B."""
    for act, expected in (("silu", 512), ("relu", 512), ("gelu_new", 2048)):
        rp = replay(model(hidden_act=act))
        ops.activation(rp, hidden(rp, width=32), "mlp/act")
        assert rp.tape.saved_total == expected, act


def test_dropout_mask_on_cuda_noise_on_cpu() -> None:
    """p = 0.1 on (1, 8, 16) bf16 requiring grad: CUDA keeps a bool mask, 128 B; CPU the bf16 noise, 256 B.
    p = 0 is no op at all (the same tensor back, nothing saved)."""
    for device, expected in (("cuda", 128), ("cpu", 256)):
        rp = replay(model(), device=device)
        ops.dropout(rp, hidden(rp), 0.1, "residual/dropout")
        assert rp.tape.saved_total == expected, device
    rp = replay(model())
    x = hidden(rp)
    assert ops.dropout(rp, x, 0.0, "residual/dropout") is x and rp.tape.saved_total == 0


def test_rope_saves_cos_and_sin() -> None:
    """q (1, 2, 8, 8) bf16 requiring grad; cos and sin (1, 8, 8) bf16 (made once, shared by the blocks): the two
    products save them, 2 x 8*8*2 = 256 B. Half-rotary (d*0.5 = 4): (1, 8, 4) tables, 128 B."""
    for fraction, expected in ((1.0, 256), (0.5, 128)):
        rp = replay(model(partial_rotary_factor=fraction))
        t, d = rp.tape, int(8 * fraction)
        q = t.new((1, 2, 8, 8), 2, True)
        out = ops.rope(rp, q, (t.new((1, 8, d), 2, False), t.new((1, 8, d), 2, False)), "attention")
        assert rp.tape.saved_total == expected and out.shape == (1, 2, 8, 8)


def _qkv(rp, kv: int = 1):  # type: ignore[no-untyped-def]
    t = rp.tape
    return t.new((1, 2, 8, 8), 2, True), t.new((1, kv, 8, 8), 2, True), t.new((1, kv, 8, 8), 2, True)


def test_eager_attention_keeps_the_scores() -> None:
    """Eager, bf16, a=2, k=1: repeat_kv copies k and v to (1, 2, 8, 8). q @ k^T saves q and the repeated k
    (256 + 256 B); softmax in fp32 saves its (1, 2, 8, 8) output, 2*8*8*4 = 512 B; the bf16 probabilities and
    the repeated v are saved by the product with v (256 + 256 B): 1,536 B, of which the s^2 terms are 768 B."""
    rp = replay(model(), attention="eager")
    out = ops.attention(rp, *_qkv(rp))
    assert by_component(rp.tape.saved) == {"attention/qk": 512, "attention/scores": 512, "attention/pv": 512}
    assert out.shape == (1, 8, 16)


def test_sdpa_keeps_inputs_output_and_logsumexp() -> None:
    """sdpa on CUDA, no mask (GQA handled by the kernel): q 256, k 128, v 128, output (1, 2, 8, 8) 256 B and the
    fp32 logsumexp (1, 2, 8), 64 B: 832 B. With a padding mask transformers repeats k and v (256 B each) and the
    kernel keeps the additive (1, 1, 8, 8) bf16 mask, 128 B: 256*4 + 128 + 64 = 1,216 B."""
    rp = replay(model())
    ops.attention(rp, *_qkv(rp))
    assert by_component(rp.tape.saved) == {"attention/kernel": 832}
    rp = replay(model(), padding_mask=True)
    ops.attention(rp, *_qkv(rp))
    assert by_component(rp.tape.saved) == {"attention/kernel": 1088, "attention/mask": 128}


def test_heads_first_q_makes_the_output_transpose_a_copy_on_cpu() -> None:
    """CPU sdpa's output takes q's layout. With q heads-first (rope on slices of a fused qkv: Phi-3, GPT-NeoX)
    transformers' ``transpose(1, 2).contiguous()`` copies it: a new (1, 8, 16) bf16 tensor, 1*8*16*2 = 256 B
    that the output projection would save; with q a transposed view of its projection (Llama) the result is a
    view of the kernel's output (the same storage). On CUDA the kernels write (b, s, a, d) either way."""
    rp = replay(model(), device="cpu")
    q, k, v = _qkv(rp)
    view = ops.attention(rp, q, k, v)
    saved = set(rp.tape.saved)  # keyed by storage
    assert view.storage in saved  # the kernel's output, kept for backward: no new bytes
    copy = ops.attention(rp, q, k, v, heads_first=True)
    assert copy.storage not in saved and copy.nbytes == 256
    rp = replay(model())  # CUDA
    assert ops.attention(rp, *_qkv(rp), heads_first=True).storage in set(rp.tape.saved)


def test_sdpa_with_dropout_on_cpu_runs_the_math_path() -> None:
    """CPU sdpa with attention dropout 0.1 falls back to the composite math path, in fp32: q' and k' (1, 2, 8, 8)
    fp32, 512 B each; the softmax output (1, 2, 8, 8) fp32, 512 B; the dropout noise, 512 B; the dropped
    probabilities and an fp32 copy of the repeated bf16 v, 512 B each: 6 x 512 = 3,072 B."""
    rp = replay(model(attention_dropout=0.1), device="cpu")
    ops.attention(rp, *_qkv(rp))
    assert rp.tape.saved_total == 3072
