"""``--layers-to-transform`` sharded, on 2 real gloo processes (torchrun): LoRA on layers 0 and 2 of a 4-layer scaled
Llama 3.2 with a 1,024-token vocabulary (tests/estimate/test_sharding_layers.py has the worked figures) under
fsdp, measured, estimated and traced."""

from __future__ import annotations

import pytest

from memfit.estimate import ModelShape, RunSpec, estimate_memory


@pytest.mark.slow
def test_layers_to_transform_fsdp_two_ranks_estimate_and_trace() -> None:
    """One launch of 2 processes (~1 min). The estimate within 1% of the largest rank (before: refused, 'sharded
    gradients assume the same adapters in every layer'); the trace at or below the live run + 1% (gloo's late
    release of reduce-scatter copies under load, tests/trace/test_trace_sharded.py) and within 1% of it."""
    from memfit.measure.sharded import measure_sharded
    from memfit.trace.engine import trace_step
    from memfit.validate.agreement import scaled_config

    config = scaled_config("llama-3.2-1b", 256, 4)
    config["vocab_size"] = 1024
    spec = RunSpec(method="lora", precision="fp32", batch=1, seq=64, device="cpu", sharding="fsdp", gpus=2,
                   adamw_impl="forloop", layers_to_transform=(0, 2))
    (result,) = measure_sharded(config, [spec])
    measured = result.peak_bytes
    est = estimate_memory(ModelShape.from_hf_config(config, name="llama-3.2-1b"), spec).peak_bytes
    assert abs(est - measured) / measured <= 0.01
    traced = trace_step(config, spec, name="llama-3.2-1b").peak_bytes
    assert traced <= measured * 1.01 and abs(traced - measured) / measured <= 0.01
