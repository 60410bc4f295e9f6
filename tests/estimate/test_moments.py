"""Typed step moments: what is alive at each moment of the step, by category, worked by hand."""

from __future__ import annotations

import pytest

from memfit.estimate import Category, RunSpec, estimate_memory, lookup
from memfit.estimate.moments import Moment, peak_moment

GPT2_P = 124_439_808  # GPT-2's parameter count (tests/estimate/test_params.py GOLDEN_TOTALS)


def test_moment_total_parts_and_json() -> None:
    m = Moment(phase="backward", label="backward: x", parts={Category.GRADIENTS: 40, Category.ACTIVATIONS: 2})
    assert m.total == 42 and m.part(Category.LOGITS) == 0
    assert list(m.components()) == [c for c in Category if c is not Category.UNTRACKED]
    assert m.to_dict() == {"phase": "backward", "label": "backward: x",
                           "parts": {"gradients": 40, "activations": 2}, "total": 42}


def test_peak_moment_is_the_first_of_equals() -> None:
    a = Moment(phase="forward", label="a", parts={Category.ACTIVATIONS: 5})
    b = Moment(phase="backward", label="b", parts={Category.LOGITS: 5})
    assert peak_moment((a, b)) is a


def test_optimizer_step_of_a_full_gpt2_fine_tune_by_hand() -> None:
    """GPT-2 (P = 124,439,808), full fine-tune in fp32 with AdamW on CUDA, b=1, s=8. The optimizer step holds
    the weights 4P, their gradients 4P, the two moments 8P and the foreach kernels' temporaries (one copy of
    every trainable tensor, 4P; no CPU ``step`` tensors on CUDA) = 20P = 2,488,796,160 B, plus the batch's
    input_ids and labels 2 x 8 x 8 = 128 B."""
    est = estimate_memory(lookup("gpt2").shape, RunSpec(method="full", precision="fp32", batch=1, seq=8,
                                                        adamw_impl="foreach"))
    step = next(m for m in est.moments if m.phase == "optimizer")
    assert step.label == "optimizer: step"
    assert dict(step.parts) == {Category.WEIGHTS_FROZEN: 0, Category.WEIGHTS_TRAINABLE: 4 * GPT2_P,
                                Category.OPTIMIZER: 8 * GPT2_P, Category.INPUTS: 128,
                                Category.GRADIENTS: 4 * GPT2_P, Category.TEMPORARIES: 4 * GPT2_P}
    assert step.total == 20 * GPT2_P + 128 == 2_488_796_288
    # at 8 tokens nothing else comes close: the optimizer step is the peak
    assert est.peak_moment == "optimizer: step" and est.peak_bytes == 2_488_796_288


@pytest.mark.parametrize("spec", [RunSpec(), RunSpec(method="full", checkpointing="every-k", checkpoint_every=3),
                                  RunSpec(method="qlora", checkpointing="sqrt", loss="chunked")])
def test_model_states_are_alive_in_every_moment(spec: RunSpec) -> None:
    """Weights and optimizer states exist from before the forward to after the step (steady state: the
    optimizer's states were made by the first step), so every moment holds them at their full size."""
    est = estimate_memory(lookup("llama-3.2-1b").shape, spec)
    st = est.model_states
    for m in est.moments:
        assert (m.part(Category.WEIGHTS_FROZEN), m.part(Category.WEIGHTS_TRAINABLE), m.part(Category.OPTIMIZER)) == (
            st.weights_frozen, st.weights_trainable, st.optimizer), m.label
    assert [m.phase for m in est.moments] == ["forward"] + ["backward"] * 5 + ["optimizer"]
