"""The evaluation estimate against the real transformers 5.24 ``Trainer.evaluate`` on CPU (issue 14 part 6): one
real training step, then ``evaluate()`` under the live-storage tracker (memfit.measure.evaluation). Target: the
estimate's evaluation peak within 1% of the measured one.

On CPU the "moved to the CPU" arrays of ``eval_accumulation_steps`` are the same memory, and a bf16 / fp16 model's
kept logits are converted to fp32 there at the end (``nested_numpify``): host memory on a GPU. The rows keep to
eval sets of at most k steps and fp32 / mixed precision, where the CPU figure is the device figure."""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.measure.evaluation import measure_eval  # noqa: E402

LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False,
                         **REGISTRY["llama"].keys.write(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176,
                                                        vocab=1000, positions=256)}

COMMON = {"device": "cpu", "batch": 2, "seq": 64}
ROWS: list[Any] = [
    # the case users OOM in: compute_metrics, eval_accumulation_steps None, the whole eval set's logits kept (6 steps)
    pytest.param(RunSpec(method="lora", precision="fp32", eval_batch=4, eval_metrics=True, eval_samples=24, **COMMON),
                 id="lora-fp32-metrics-all-steps"),
    pytest.param(RunSpec(method="lora", precision="mixed-bf16", eval_batch=4, eval_metrics=True, eval_samples=12,
                         eval_accumulation_steps=3, **COMMON), id="lora-mixed-metrics-accumulate-3",
                 marks=pytest.mark.slow),
    pytest.param(RunSpec(method="lora", precision="mixed-bf16", eval_batch=4, prediction_loss_only=True, **COMMON),
                 id="lora-mixed-loss-only", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("spec", ROWS)
def test_eval_estimate_matches_the_real_trainer_evaluate(spec: RunSpec) -> None:
    measured = measure_eval(LLAMA, spec)
    est = estimate_memory(ModelShape.from_hf_config(LLAMA), spec)
    ev = est.to_dict()["evaluation"]
    assert ev is not None
    err = (ev["eval_peak_bytes"] - measured.peak_bytes) / measured.peak_bytes
    assert abs(err) <= 0.01, (spec, ev, measured)
