"""The --dora agreement rows' fast subset (issue 14 part 3), measured on this CPU: estimate within 2% and trace
within 1% of the measured peak. Llama's default targets with its real vocabulary (the logits are the peak: the
magnitudes and the saved base / lora_B outputs are checked), and all-linear with vocab_size 1024 and
checkpointing, where block 0's recompute with DoRA's weight norm (eye(1024), B@A, W + s*BA) is the peak. The
estimate without DoRA was -0.14% and -40% on them (PEFT's use_dora ignored)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.validate.agreement import dora_matrix, full_matrix, run_row  # noqa: E402
from memfit.validate.rows_dora import DORA_ROWS, FAST_DORA_ROWS  # noqa: E402


def test_dora_rows_in_the_matrix() -> None:
    rows = full_matrix()
    labels = [r.label for r in rows]
    # QLoRA + DoRA rows live in rows_quant
    assert sum("dora[" in r.label and r.spec.method == "lora" for r in rows) == len(DORA_ROWS)
    assert "llama-3.2-1b dora[all-linear] fp32 sdpa - b1 s16 vocab 1024" in labels


def test_qlora_dora_label_says_both() -> None:
    """A QLoRA + DoRA row reads ``qlora+dora[...]`` (it read ``dora[...]``, like a plain DoRA row); plain DoRA rows
    keep ``dora[...]`` and QLoRA rows ``qlora[...]``."""
    from memfit.validate.rows_quant import QUANT_ROWS

    labels = {r.label: r.spec for r in full_matrix()}
    both = [label for label, s in labels.items() if s.method == "qlora" and s.use_dora]
    assert len(both) == sum(s.method == "qlora" and s.use_dora for _, s in QUANT_ROWS) >= 2
    assert all(label.split()[1].startswith("qlora+dora[") for label in both), both
    assert "llama-3.2-1b qlora+dora[default] fp32 sdpa - b2 s64" in labels
    assert all(label.split()[1].startswith("dora[") for label, s in labels.items() if s.method == "lora" and s.use_dora)
    assert all(label.split()[1].startswith("qlora[") for label, s in labels.items()
               if s.method == "qlora" and not s.use_dora)


@pytest.mark.slow
@pytest.mark.parametrize("row", dora_matrix(FAST_DORA_ROWS), ids=lambda r: r.label)
def test_dora_row(row) -> None:  # type: ignore[no-untyped-def]
    r = run_row(row)
    assert abs(r.estimate_error) <= 0.02, (r.estimate_bytes, r.measured_bytes)
    assert r.trace_error is not None and abs(r.trace_error) <= 0.01, (r.trace_bytes, r.measured_bytes)
