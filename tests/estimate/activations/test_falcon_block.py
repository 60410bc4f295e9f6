"""Falcon's block (``transformers/models/falcon/modeling_falcon.py``, 5.24.0), worked by hand: multi-query k and v
indexed out of the fused output, its own attention code (sdpa without ``enable_gqa``: torch's math path, whose
matmuls broadcast k and v over the heads), one LayerNorm read by the attention and the MLP.

b=1 or 2, s=8, h=16, a=2 heads of d=8, one key/value head (multi_query), i = 4h = 64; fp32 = 4 B; full fine-tune on
the CPU, dropout off.
"""

from __future__ import annotations

from typing import Any

from activation_cases import by_component, hidden, model, replay, with_layout

from memfit.estimate.activations.block import block_forward
from memfit.estimate.activations.embedding import rotary_tables
from memfit.estimate.activations.tape import SymTensor

FALCON: dict[str, Any] = {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
                          "vocab_size": 64, "max_position_embeddings": 64}


def _saved(batch: int, **layout: Any) -> dict[str, int]:
    shape = model(FALCON)
    if layout:
        shape = with_layout(shape, **layout)
    rp = replay(shape, method="full", precision="fp32", device="cpu", attention="sdpa", batch=batch)
    rope = rotary_tables(rp)
    assert rope is not None
    x = rp.tape.new((batch, 8, 16), 4, True) if batch != 1 else hidden(rp)
    out: SymTensor = block_forward(rp, x, rope)
    assert out.shape == (batch, 8, 16)
    saved = by_component(rp.tape.saved)
    assert saved.pop("attention/rope") == 2 * 8 * 8 * 4  # cos, sin (1, 8, 8) fp32: shared by every block
    return saved


def test_falcon_block_sdpa_batch_1_saves_7232_bytes() -> None:
    """Batch 1, sdpa (the math path: one key/value head, no enable_gqa):

    ============================  =============================================================  =======
    op                            saved                                                          bytes
    ============================  =============================================================  =======
    input_layernorm               x 8*16*4 + mean and rstd (1, 8, 1) fp32, 32 each                 576
    query_key_value (16 -> 32)    its input, 512 (dense_h_to_4h reads the same tensor)             512
    k, v = qkv[..., [-2], :] ...  copies (1, 8, 8); q is a view
    math sdpa: q' @ k'^T          q * sqrt(scale) (1, 2, 8, 8) fp32 512 + k' (1, 1, 8, 8) 256:
                                  the (1, 2, ...) broadcast of k' reshapes as a view at b = 1      768
    softmax                       its output (1, 2, 8, 8) fp32                                     512
    p @ v                         v itself (1, 1, 8, 8), 256                                       256
    dense                         the attention output, 512                                        512
    dense_h_to_4h, gelu           gelu's input (1, 8, 64) fp32                                    2048
    dense_4h_to_h                 gelu's output                                                   2048
    ============================  =============================================================  =======

    7,232 B. A real step saves the same in the attention (tiny Falcon, h=64, a=4, s=32, LoRA fp32 sdpa, checked
    while writing this: 8,192 + 2,048 + 16,384 + 2,048 = 28,672 B, beside 16 B of the list indices).
    """
    saved = _saved(1)
    assert saved == {"norm": 576, "attention/qkv": 512, "attention/qk": 768, "attention/scores": 512,
                     "attention/pv": 256, "attention/out": 512, "mlp/act": 2048, "mlp/down": 2048}
    assert sum(saved.values()) == 7232


def test_falcon_block_sdpa_batch_2_copies_k_and_v_over_the_heads() -> None:
    """Batch 2: the math path's matmuls cannot reshape the broadcast (2, 2, ...) k' and v as views, so each bmm
    saves a (4, 8, 8) fp32 copy: q' 1,024 + k' 1,024 (attention/qk), p 1,024, v' 1,024; everything else doubles.
    Attention 4,096 B, not 2 x 1,536 = 3,072; with transformers' fused kernel (enable_gqa, no copies) it would be
    q, k, v, out and the logsumexp instead."""
    saved = _saved(2)
    assert (saved["attention/qk"], saved["attention/scores"], saved["attention/pv"]) == (2048, 1024, 1024)
    assert sum(saved.values()) == 2 * 7232 + 1024
    assert "attention/kernel" in _saved(2, sdpa_direct=False)


def test_multi_query_k_and_v_are_copies_not_views_of_the_fused_output() -> None:
    """With views (GPT-NeoX's split) the saved v of the math path at b=1 would keep the whole fused output,
    (1, 8, 32) fp32 = 1,024 B, instead of its own 256 B."""
    assert _saved(1, multi_query_kv_copies=False)["attention/pv"] == 1024
