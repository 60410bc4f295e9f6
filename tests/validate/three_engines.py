"""One offload row through the three engines (the --offload and --offload-activations rows' fast subsets): a real
CPU step, the estimate within 2% and the trace within 1% of its device peak, and the same host bytes in all three."""

from __future__ import annotations

from typing import Any

from memfit.estimate import estimate_memory
from memfit.measure.point import measure_point
from memfit.trace.engine import trace_step


def host_bytes_agree(row: Any) -> int:
    """Run ``row`` (a :class:`memfit.validate.agreement.MatrixRow`) measured, estimated and traced; assert the device
    targets and equal host bytes; return the host bytes."""
    measured = measure_point(row.config, row.spec, steps=0, warmup=0)
    assert measured.fits and measured.peak_bytes
    est = estimate_memory(row.shape, row.spec)
    traced = trace_step(row.config, row.spec, name=row.model)
    assert abs(est.peak_bytes - measured.peak_bytes) / measured.peak_bytes <= 0.02
    assert abs(traced.peak_bytes - measured.peak_bytes) / measured.peak_bytes <= 0.01
    assert measured.host_bytes == est.host_bytes == traced.host_bytes
    return int(measured.host_bytes)
