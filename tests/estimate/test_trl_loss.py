"""``--loss trl``: TRL 1.16's SFTTrainer default loss (its fused LM head) in the estimate (issue 14 part 4).
Expected bytes are worked by hand from trl/kernels/chunked_logprob.py and trl/trainer/utils.py (add_fused_lm_head);
the real TRL step is measured in tests/measure/test_trl_loss_measured.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memfit.errors import MemfitError
from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory
from memfit.estimate.category import Category
from memfit.estimate.trl_loss import trl_scored_tokens

LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False,
                         **REGISTRY["llama"].keys.write(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176,
                                                        vocab=1000, positions=256)}
SHAPE = ModelShape.from_hf_config(LLAMA)
SPEC = RunSpec(method="lora", precision="fp32", batch=2, seq=128, loss="trl", targets=("q_proj", "v_proj"), rank=8)


def _at_loss(spec: RunSpec) -> int:
    return next(m for m in estimate_memory(SHAPE, spec).moments if m.label == "backward: loss").part(Category.LOGITS)


def test_the_head_at_the_loss_is_trls_and_scales_with_the_loss_tokens_on_cuda() -> None:
    """N = 2 x 127 = 254 scored positions, h 64, V 1000, fp32, head frozen: saved 254*64*4 + 254*8 + 2*254*4 +
    254*4 = 70,104; grad_hidden 254*64*4 = 65,024; mm_buf 254 x 32768 x 4 = 33,292,288 and the tile 29 x 254 x 1000
    = 7,366,000: 40,793,416. With a quarter of the labels not -100, on CUDA N = ceil(63.5) = 64: 17,664 + 16,384 +
    8,388,608 + 1,856,000 = 10,278,656 (30,514,760 less, what TRL's own code measured). Off CUDA TRL scores every
    position: the share changes nothing."""
    assert trl_scored_tokens(SPEC) == 254
    assert _at_loss(SPEC) == 40_793_416
    assert trl_scored_tokens(SPEC.with_(loss_token_share=0.25)) == 64
    assert _at_loss(SPEC.with_(loss_token_share=0.25)) == 10_278_656
    cpu = SPEC.with_(device="cpu")
    assert _at_loss(cpu.with_(loss_token_share=0.25)) == _at_loss(cpu) == 40_793_416


def test_no_bsv_logits_anywhere_in_the_step() -> None:
    """The standard loss's fp32 log-probabilities (b*s*V*4 = 1,024,000 B) appear in no moment of --loss trl; the
    lm_head's backward runs inside TRL's (its moment books no logits)."""
    est = estimate_memory(SHAPE, SPEC)
    lm_head = next(m for m in est.moments if m.label == "backward: lm_head")
    assert lm_head.part(Category.LOGITS) == 0
    assert est.activations.logits_bytes == 0


def test_share_is_checked_and_needs_loss_trl(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    from memfit.cli import main

    with pytest.raises(MemfitError, match="--loss-token-share must be in"):
        RunSpec(loss="trl", loss_token_share=0.0)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    assert main(["estimate", str(cfg), "--loss-token-share", "0.3"]) != 0
    out = capsys.readouterr()
    assert "add --loss trl" in out.err + out.out and "Traceback" not in out.err
    assert main(["estimate", str(cfg), "--loss", "trl", "--loss-token-share", "0.25", "--seq", "128",
                 "--batch", "2"]) == 0
    assert "TRL's fused LM head scores 64 positions" in " ".join(capsys.readouterr().out.split())
