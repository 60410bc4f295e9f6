"""``--offload`` measured for real: the checkpoints' host copies booked apart from the device's bytes.

Expected figures are worked by hand from the model's shape (transformers 5.24.0 offload: one block input of
b*s*h per checkpointed layer goes to the host, :mod:`memfit.runtime.offload`), and the device drop from the rule that
a frozen embedding's output (a leaf made to require grad by ``enable_input_require_grads``) stays on the device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.estimate import ModelShape, RunSpec, estimate_memory  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402

# 4 layers, hidden 64: one block input (b=2, s=32, h=64, fp32) is 2*32*64*4 = 16,384 B
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 1000, "max_position_embeddings": 256,
         "hidden_act": "silu", "tie_word_embeddings": False}
BLOCK_INPUT = 2 * 32 * 64 * 4


def _spec(**kw: object) -> RunSpec:
    return RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=32,
                   checkpointing="full", **kw)  # type: ignore[arg-type]


@pytest.mark.slow
def test_measured_offload_books_host_copies_apart() -> None:
    """Four checkpointed layers: 4 x 16,384 = 65,536 B of host copies. The device's peak (backward at the loss,
    every checkpoint alive) drops by three block inputs, 49,152 B: block 0's input is the frozen embedding's output,
    a leaf the graph keeps on the device. (Before: transformers' save_on_cpu(pin_memory=True) raised on a CPU-only
    torch and ``measure --offload`` failed; there was no host figure.)"""
    plain = measure_point(LLAMA, _spec(), steps=0, warmup=0)
    off = measure_point(LLAMA, _spec(offload=True), steps=0, warmup=0)
    assert off.fits and off.error is None
    assert off.host_bytes == 4 * BLOCK_INPUT
    assert plain.host_bytes == 0
    assert plain.peak_bytes - off.peak_bytes == 3 * BLOCK_INPUT
    assert off.to_dict()["host_bytes"] == 65_536


@pytest.mark.slow
def test_estimate_and_trace_agree_with_the_measured_offload() -> None:
    """The estimate and the trace of the same step: device peak within 0.1% and the same host bytes."""
    measured = measure_point(LLAMA, _spec(offload=True), steps=0, warmup=0)
    est = estimate_memory(ModelShape.from_hf_config(LLAMA, name="llama"), _spec(offload=True))
    traced = trace_step(LLAMA, _spec(offload=True), name="llama")
    assert measured.peak_bytes is not None
    assert abs(est.peak_bytes - measured.peak_bytes) / measured.peak_bytes < 0.001
    assert traced.peak_bytes == measured.peak_bytes
    assert est.host_bytes == traced.host_bytes == measured.host_bytes == 4 * BLOCK_INPUT
    assert est.to_dict()["host_bytes"] == traced.to_dict()["host_bytes"] == 65_536


def test_full_finetune_offload_frees_every_block_input() -> None:
    """A full fine-tune trains the embedding: block 0's input has a grad_fn (no leaf), so every checkpoint goes to
    the host and none stays: kept 0 B on the device, 4 x 16,384 B on the host (estimate only: no torch run)."""
    est = estimate_memory(ModelShape.from_hf_config(LLAMA, name="llama"), _spec(offload=True).with_(method="full"))
    assert est.activations.checkpoints == 0
    assert est.host_bytes == 4 * BLOCK_INPUT
