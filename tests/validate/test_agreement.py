"""Agreement (:mod:`memfit.validate.agreement`), the fast subset: seven real architectures scaled down, one
real CPU training step each (eight rows: Llama also with Adafactor), against the estimate and the trace. A
regression in any engine fails CI here.

Targets: estimate vs measured median |error| <= 2% and max <= 5%; trace vs measured max <= 1%; the Adafactor
row, whose peak is the optimizer step, within 0.1% (the estimate was +24% there when it counted a full
second moment for the non-square embedding).
"""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.estimate import ModelShape, lookup  # noqa: E402
from memfit.validate.agreement import FAST_ROWS, fast_matrix, full_matrix, run_matrix, scaled_config  # noqa: E402


def test_scaled_configs_keep_real_ratios_and_vocabulary() -> None:
    """Worked for llama-3.2-1b at hidden 256: head_dim 64 stays, 4 heads, 32:8 -> 4:1 kv, i = 4h, V real."""
    s = ModelShape.from_hf_config(scaled_config("llama-3.2-1b", 256, 2))
    assert (s.hidden, s.head_dim, s.n_heads, s.n_kv_heads, s.intermediate, s.n_layers) == (256, 64, 4, 1, 1024, 2)
    assert s.vocab == lookup("llama-3.2-1b").shape.vocab == 128256


def test_dropout_rows_in_the_fast_subset_and_the_matrix() -> None:
    """GPT-2 and OPT train with dropout (their configs' defaults, kept by scaled_config); the matrix adds rows
    with LoRA dropout and with attention / residual dropout set in configs that have none."""
    fast = [r.label for r in fast_matrix() if r.dropout_label]
    assert len(fast) >= 2 and any("lora 0.1" in label for label in fast), fast
    labels = [r.label for r in full_matrix()]
    assert "gpt2 full fp32 sdpa - b2 s128 dropout(attn 0.1, resid 0.1, embd 0.1)" in labels
    assert "llama-3.2-1b full fp32 sdpa - b2 s128 dropout(attn 0.1)" in labels
    assert "llama-3.2-1b full fp32 sdpa - b2 s128" in labels  # dropout 0: the label as before


@pytest.mark.slow
def test_estimate_and_trace_agree_with_measured() -> None:
    results = run_matrix(fast_matrix())
    # guard: the rows ran and span the architectures (a shrunken matrix would pass the bounds below vacuously)
    assert len(results) == len(FAST_ROWS) and len({r.row.shape.model_type for r in results}) >= 6
    est = [abs(r.estimate_error) for r in results]
    trace = [abs(r.trace_error) for r in results if r.trace_error is not None]
    report = "\n".join(f"{r.row.label}: measured {r.measured_bytes:,} estimate {r.estimate_error:+.2%} "
                       f"trace {r.trace_error:+.2%}" for r in results)
    assert len(trace) == len(results), report
    assert statistics.median(est) <= 0.02, report
    assert max(est) <= 0.05, report
    assert max(trace) <= 0.01, report
    (ada,) = [r for r in results if r.row.spec.optimizer == "adafactor"]
    assert ada.measured_phase == "optimizer" and abs(ada.estimate_error) <= 0.001, report
    # the baselines the issue compares against are really worse: activations and logits matter here
    assert statistics.median(abs(r.error(r.states_only_bytes) or 0) for r in results) > 0.05, report


def test_every_matrix_row_has_its_own_label() -> None:
    """RESULTS ``## agreement`` lists rows by label: two rows under one label (the --loss trl act-offload rows read
    like the standard-loss ones before the label named the loss) cannot be told apart."""
    from collections import Counter

    from memfit.validate.rows_act_offload import act_offload_matrix

    labels = Counter(r.label for r in full_matrix() + act_offload_matrix())
    assert [label for label, n in labels.items() if n > 1] == []
