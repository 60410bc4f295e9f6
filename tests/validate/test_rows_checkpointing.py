"""The sqrt / every-k agreement rows (:mod:`memfit.validate.rows_checkpointing`), fast subset: a 5-layer Llama with
sqrt segments (3 + 2) and a 5-layer GPT-2 (dropout 0.1) with every-3 (blocks 0 and 3), each one real CPU step
against the estimate and the trace. Targets as the matrix's: estimate within 2% (median) / 5% (max), trace 1%."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from memfit.validate.agreement import run_matrix  # noqa: E402
from memfit.validate.rows_checkpointing import (  # noqa: E402
    CHECKPOINTING_ROWS,
    checkpointing_matrix,
    fast_checkpointing_matrix,
)


def test_rows_cover_both_modes_on_two_architectures() -> None:
    rows = checkpointing_matrix()
    assert len(rows) == len(CHECKPOINTING_ROWS)
    for mode in ("sqrt", "every-k"):
        assert {r.shape.model_type for r in rows if r.spec.checkpointing == mode} == {"llama", "gpt2"}
    assert len({r.label for r in rows}) == len(rows)  # the labels tell the rows apart (mode, k and depth)
    assert "gpt2 lora[default] fp32 sdpa ckpt-every4 L9 b2 s64" in rows[-1].label


def test_sqrt_and_every_k_agree_with_measured() -> None:
    results = run_matrix(fast_checkpointing_matrix())
    report = "\n".join(f"{r.row.label}: measured {r.measured_bytes:,} estimate {r.estimate_error:+.2%} "
                       f"trace {r.trace_error}" for r in results)
    assert {r.row.spec.checkpointing for r in results} == {"sqrt", "every-k"}, report
    assert all(r.trace_error is not None and abs(r.trace_error) <= 0.01 for r in results), report
    assert all(abs(r.estimate_error) <= 0.02 for r in results), report
