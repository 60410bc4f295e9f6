"""``--trainable-tokens`` on tied embeddings in trace: PEFT 0.21.2 wraps the tied lm_head in a
``TrainableTokensWrapper`` whose ``.weight`` is a new merged (V, h) table; the tracker reads the wrapped nn.Linear's
weight instead (reading ``.weight`` ran ``index_copy`` on fake tensors outside the fake mode: an AssertionError). The
traced peak is the real CPU step's (memfit.measure, the oracle), and the estimate follows both."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memfit.estimate import ModelShape, estimate_memory  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402

measure_point = pytest.importorskip("memfit.measure.point").measure_point

# vocabulary 4,000 x hidden 64, 16 tokens: the merged table (1 MB in fp32) and its gradient make the peak (llama fp32:
# the lm_head's matmul backward; gpt2 mixed-bf16: the end of the lm_head's forward, table and bf16 copy)
CASES = [("llama", "fp32", {"tie_word_embeddings": True}), ("gpt2", "mixed-bf16", {})]


@pytest.mark.parametrize("arch,precision,extra", CASES, ids=[f"{a}-{p}" for a, p, _ in CASES])
def test_tied_trainable_tokens_trace_matches_a_real_step(arch: str, precision: str, extra: dict[str, object]) -> None:
    cfg = tiny_config(arch, layers=2, hidden=64, heads=4, vocab=4000, pad_token_id=0, **extra)
    spec = RunSpec(method="lora", precision=precision, attention="sdpa", batch=1, seq=16, device="cpu",
                   trainable_token_indices=(3, 3999))
    assert ModelShape.from_hf_config(cfg).tie_embeddings
    traced = trace_step(cfg, spec).peak_bytes
    point = measure_point(cfg, spec, device="cpu", steps=1, warmup=0)
    assert point.fits and point.peak_bytes
    assert abs(traced - point.peak_bytes) <= 0.01 * point.peak_bytes, (traced, point.peak_bytes)
    est = estimate_memory(ModelShape.from_hf_config(cfg), spec).peak_bytes
    assert abs(est - point.peak_bytes) <= 0.01 * point.peak_bytes, (est, point.peak_bytes)
