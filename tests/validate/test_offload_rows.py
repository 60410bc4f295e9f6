"""The --offload agreement rows' fast subset (issue 14 part 5): two scaled architectures with their real vocabularies,
measured on this CPU; estimate within 2% and trace within 1% of the measured device peak, and the same host bytes.

Host bytes worked by hand: one fp32 block input per checkpointed layer, 2 layers: Llama b2 s64 h256:
2 x (2 * 64 * 256 * 4) = 262,144 B; Qwen 2.5 b1 s64 h256: 2 x (64 * 256 * 4) = 131,072 B."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.estimate import estimate_memory  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402
from memfit.validate.agreement import offload_matrix  # noqa: E402
from memfit.validate.rows_offload import FAST_OFFLOAD_ROWS  # noqa: E402

HOST = {"llama-3.2-1b": 262_144, "qwen2.5-0.5b": 131_072}


@pytest.mark.slow
@pytest.mark.parametrize("row", offload_matrix(FAST_OFFLOAD_ROWS), ids=lambda r: r.label)
def test_offload_row(row) -> None:  # type: ignore[no-untyped-def]
    measured = measure_point(row.config, row.spec, steps=0, warmup=0)
    assert measured.fits and measured.peak_bytes
    est = estimate_memory(row.shape, row.spec)
    traced = trace_step(row.config, row.spec, name=row.model)
    assert abs(est.peak_bytes - measured.peak_bytes) / measured.peak_bytes <= 0.02
    assert abs(traced.peak_bytes - measured.peak_bytes) / measured.peak_bytes <= 0.01
    assert measured.host_bytes == est.host_bytes == traced.host_bytes == HOST[row.model]
