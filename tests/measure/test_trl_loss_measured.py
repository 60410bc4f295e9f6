"""``--loss trl`` against TRL 1.16's own fused LM head in real CPU training steps (memfit.measure.trl_loss): the
peak within 1% of the estimate where TRL scores every position (its CPU path), and, with TRL's CUDA branch
(only labels != -100 gathered) taken on the CPU, the memory a completion-only mask saves equal to the estimate's."""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory

pytest.importorskip("torch")
pytest.importorskip("trl")

from memfit.measure.trl_loss import measure_trl_step  # noqa: E402

LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False,
                         **REGISTRY["llama"].keys.write(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176,
                                                        vocab=1000, positions=256)}
SHAPE = ModelShape.from_hf_config(LLAMA)


@pytest.mark.parametrize("precision", ["fp32", pytest.param("mixed-bf16", marks=pytest.mark.slow)])
def test_trl_loss_estimate_matches_trls_own_step(precision: str) -> None:
    spec = RunSpec(method="lora", precision=precision, device="cpu", batch=2, seq=128, loss="trl",
                   targets=("q_proj", "v_proj"), rank=8)
    measured = measure_trl_step(LLAMA, spec)
    est = estimate_memory(SHAPE, spec).peak_bytes
    assert abs(est - measured) <= 0.01 * measured, (est, measured)
    # a quarter of the labels kept: TRL's CUDA branch gathers 64 of the 254 positions
    full = measure_trl_step(LLAMA, spec, compact=True)
    quarter = measure_trl_step(LLAMA, spec.with_(loss_token_share=0.25), compact=True)
    cuda = spec.with_(device="cuda")
    saved = (estimate_memory(SHAPE, cuda).peak_bytes
             - estimate_memory(SHAPE, cuda.with_(loss_token_share=0.25)).peak_bytes)
    assert abs((full - quarter) - saved) <= 0.01 * saved, (full - quarter, saved)
