"""The MoE PEFT agreement rows' fast subset (issue 14 part 3, :mod:`memfit.validate.rows_moe_peft`), measured on this
CPU: estimate within 2% and trace within 1% of the measured peak. GPT-OSS (two layers, vocab_size 1024, bf16) with
q_proj, v_proj and ``bias="all"``: its attention biases and router bias train, its experts' biases stay frozen
(measured 34,237,408 B, estimate +0.0075%, trace 0.0000%; the estimate refused it before). The rows are in the full
matrix."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.validate.agreement import full_matrix, peft_layer_matrix, run_row  # noqa: E402
from memfit.validate.rows_moe_peft import FAST_MOE_PEFT_ROWS, MOE_PEFT_ROWS  # noqa: E402


def test_moe_rows_in_the_matrix() -> None:
    labels = {r.label for r in full_matrix()}
    assert {r.label for r in peft_layer_matrix(MOE_PEFT_ROWS)} <= labels
    assert "gpt-oss-20b lora[q_proj,v_proj bias all] bf16 eager - b2 s64 vocab 1024" in labels
    assert "mixtral-8x7b lora[q_proj,v_proj,w1,w3,w2 layers 2] bf16 sdpa - b2 s64 vocab 1024" in labels


@pytest.mark.slow
@pytest.mark.parametrize("row", peft_layer_matrix(FAST_MOE_PEFT_ROWS), ids=lambda r: r.label)
def test_moe_peft_row(row) -> None:  # type: ignore[no-untyped-def]
    r = run_row(row)
    assert abs(r.estimate_error) <= 0.02, (r.estimate_bytes, r.measured_bytes)
    assert r.trace_error is not None and abs(r.trace_error) <= 0.01, (r.trace_bytes, r.measured_bytes)
