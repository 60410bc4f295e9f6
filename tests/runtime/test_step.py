"""The Trainer-order step: the optimizers it builds, its random batch, its phases, a batch given by the caller."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import build_model, tiny_config  # noqa: E402
from memfit.runtime.step import StepInputs, make_optimizer, random_batch, run_step  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker  # noqa: E402

LLAMA = tiny_config("llama", layers=1, hidden=32, heads=2, vocab=64)


def test_make_optimizer_builds_what_the_spec_names() -> None:
    model = build_model(LLAMA, RunSpec(method="full"), device="meta")
    adamw = make_optimizer(model, RunSpec(optimizer="adamw"))
    assert type(adamw).__name__ == "AdamW" and adamw.defaults["weight_decay"] == 0.0
    # the Trainer's default adamw_torch_fused; --adamw-impl foreach / forloop as adamw_torch chooses them
    assert adamw.defaults["fused"] and not adamw.defaults["foreach"]
    foreach = make_optimizer(model, RunSpec(adamw_impl="foreach")).defaults
    forloop = make_optimizer(model, RunSpec(adamw_impl="forloop")).defaults
    assert (foreach["fused"], foreach["foreach"], forloop["fused"], forloop["foreach"]) == (False, True, False, False)
    assert make_optimizer(model, RunSpec(optimizer="sgd")).defaults["momentum"] == 0
    assert make_optimizer(model, RunSpec(optimizer="sgd-momentum")).defaults["momentum"] == 0.9
    assert type(make_optimizer(model, RunSpec(optimizer="adafactor"))).__name__ == "Adafactor"
    assert type(make_optimizer(model, RunSpec(optimizer="adamw-8bit"))).__name__ == "AdamW8bit"
    with pytest.raises(MemfitError, match="runs on CUDA only"):
        make_optimizer(model, RunSpec(optimizer="paged-adamw-8bit"))
    assert type(make_optimizer(model, RunSpec(optimizer="paged-adamw-32bit"), paged=False)).__name__ == "AdamW32bit"
    model.requires_grad_(False)
    with pytest.raises(MemfitError, match="no trainable parameters"):
        make_optimizer(model, RunSpec())


def test_random_batch_is_the_same_for_a_seed() -> None:
    a = random_batch(batch=2, seq=8, vocab=64, device="cpu")
    assert a.shape == (2, 8) and a.dtype == torch.int64 and 0 <= int(a.min()) and int(a.max()) < 64
    assert torch.equal(a, random_batch(batch=2, seq=8, vocab=64, device="cpu"))
    assert not torch.equal(a, random_batch(batch=2, seq=8, vocab=64, device="cpu", seed=1))


def test_a_step_runs_in_phases_and_leaves_no_gradients() -> None:
    """b=2, s=16: 32 tokens; the loss is the model's own cross-entropy on the batch, computed here before the
    step updates the weights; zero_grad(set_to_none=True) leaves every .grad None."""
    torch.manual_seed(0)
    spec = RunSpec(method="full", precision="fp32", batch=2, seq=16, device="cpu")
    model = build_model(LLAMA, spec)
    ids = random_batch(batch=2, seq=16, vocab=64, device="cpu")
    labels = ids.clone()
    labels[:, :4] = -100  # a prompt the loss skips
    with torch.no_grad():
        expected = float(model(input_ids=ids, labels=labels).loss)
    tracker = LiveTensorTracker(vocab=64)
    tracker.track_model(model)
    result = run_step(model, spec, batch=2, seq=16, vocab=64, device="cpu", tracker=tracker,
                      inputs=StepInputs(input_ids=ids, labels=labels))
    assert result.tokens == 32 and result.seconds > 0
    assert result.loss == pytest.approx(expected, rel=1e-5)
    assert {"forward", "backward", "optimizer"} <= set(tracker.phase_peaks)
    assert all(p.grad is None for p in model.parameters())
