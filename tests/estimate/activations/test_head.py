"""The final norm, lm_head and the loss, worked by hand: b=1, s=8 (T=8), h=16, V=64; bf16 = 2 B, fp32 = 4 B."""

from __future__ import annotations

import pytest
from activation_cases import hidden, model, replay

from memfit.estimate.activations.head import chunk_rows, head_and_loss


def test_standard_loss_lora() -> None:
    """LoRA, bf16: the final RMSNorm saves x.float() 512 B + rsqrt 32 B = 544 B; lm_head is frozen (nothing).
    The loss: logits.float() then log_softmax, whose fp32 output (8, 64) is saved, 8*64*4 = 2,048 B; nll_loss
    saves the int64 labels, 64 B; the fp32 mean, 4 B: 2,116 B. The logits themselves: 8*64*2 = 1,024 B; one
    vocabulary-wide fp32 tensor: 2,048 B."""
    rp = replay(model())
    head = head_and_loss(rp, hidden(rp))
    assert (head.saved, head.loss, head.logits_bytes, head.loss_workspace) == (544, 2116, 1024, 2048)


def test_standard_loss_full() -> None:
    """Full fine-tune, bf16: the norm's weight is trained, so its product also saves the cast y (8, 16) bf16,
    256 B; lm_head's weight is trained, so it saves its input, the norm's output (another 256 B): 1,056 B."""
    rp = replay(model(), method="full")
    assert head_and_loss(rp, hidden(rp)).saved == 1056


def test_softcapped_logits_keep_tanh_s_output() -> None:
    """Gemma 2 soft-caps the logits: tanh(logits / 30) * 30, and tanh saves its (1, 8, 64) bf16 output, 1,024 B
    beyond the norm (Gemma's RMSNorm, LoRA: 512 + 32 + the fp32 1 + w, 64 B = 608 B)."""
    gemma2 = {"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32, "vocab_size": 64}
    rp = replay(model(gemma2), attention="eager")
    assert head_and_loss(rp, hidden(rp)).saved == 608 + 1024


def test_chunked_loss_keeps_gradients_not_logits() -> None:
    """Fused linear cross-entropy: ceil(V / h) = 4, ceil(T / 4) = 2 rows per chunk: one chunk's fp32 logits
    2*64*4 = 512 B. Kept for the backward: d(hidden) (8, 16) bf16 256 B and the labels 64 B: 320 B (d(lm_head)
    too when it is trained: 64*16*2 = 2,048 B more); no logits."""
    rp = replay(model(), loss="chunked")
    head = head_and_loss(rp, hidden(rp))
    assert (head.loss, head.logits_bytes, head.loss_workspace) == (320, 0, 512)
    rp = replay(model(), loss="chunked", method="full")
    assert head_and_loss(rp, hidden(rp)).loss == 320 + 2048


@pytest.mark.parametrize(("tokens", "vocab", "width", "rows"), [
    (8, 64, 16, 2),  # ceil(64/16) = 4, ceil(8/4) = 2
    (8192, 128_256, 4096, 256),  # Llama-3.1-8B b=4 s=2048: ceil(128256/4096) = 32, 8192/32 = 256
    (3, 64, 16, 1),  # ceil(3/4) = 1
    (5, 10, 16, 5),  # ceil(10/16) = 1 -> 5 rows, the power of two 8 capped at b*s = 5
])
def test_chunk_rows(tokens: int, vocab: int, width: int, rows: int) -> None:
    assert chunk_rows(tokens, vocab, width) == rows
