"""The --offload agreement rows' fast subset (issue 14 part 5): two scaled architectures with their real vocabularies,
measured on this CPU; estimate within 2% and trace within 1% of the measured device peak, and the same host bytes.

Host bytes worked by hand: one fp32 block input per checkpointed layer, 2 layers: Llama b2 s64 h256:
2 x (2 * 64 * 256 * 4) = 262,144 B; Qwen 2.5 b1 s64 h256: 2 x (64 * 256 * 4) = 131,072 B."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from three_engines import host_bytes_agree  # noqa: E402

from memfit.validate.agreement import offload_matrix  # noqa: E402
from memfit.validate.rows_offload import FAST_OFFLOAD_ROWS  # noqa: E402

HOST = {"llama-3.2-1b": 262_144, "qwen2.5-0.5b": 131_072}


@pytest.mark.slow
@pytest.mark.parametrize("row", offload_matrix(FAST_OFFLOAD_ROWS), ids=lambda r: r.label)
def test_offload_row(row) -> None:  # type: ignore[no-untyped-def]
    assert host_bytes_agree(row) == HOST[row.model]
