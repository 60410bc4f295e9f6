"""measure_point on CPU: linear in batch, checkpointing saves memory, model states by category, OOM as a result."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memfit.estimate import ModelShape, RunSpec  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.measure.regression import peak_vs_batch  # noqa: E402
from memfit.runtime.build import build_model, tiny_config  # noqa: E402

SMALL = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=256)
# deep, narrow, small vocabulary: activations dominate, where the lesson's shape shows
DEEP = tiny_config("llama", layers=12, hidden=32, heads=2, intermediate=64, vocab=64)


def test_peak_is_linear_in_batch() -> None:
    spec = RunSpec(method="lora", precision="fp32", device="cpu", seq=32)
    runs = [measure_point(SMALL, spec.with_(batch=b), steps=1) for b in (2, 4, 8)]
    assert all(r.fits for r in runs)
    (line,) = peak_vs_batch(runs, ModelShape.from_hf_config(SMALL))
    assert line.r2 >= 0.99
    assert line.slope_bytes_per_sample > 0
    # the intercept holds at least the model states: every parameter (fp32) plus AdamW's two fp32 moments
    # of the trainable ones, counted here from the model itself
    model = build_model(SMALL, spec)
    weights = sum(p.numel() * 4 for p in model.parameters())
    moments = sum(2 * p.numel() * 4 for p in model.parameters() if p.requires_grad)
    assert line.intercept_bytes >= weights + moments


def test_checkpointing_saves_memory_where_activations_dominate() -> None:
    spec = RunSpec(method="full", precision="fp32", device="cpu", batch=2, seq=128, attention="eager")
    without = measure_point(DEEP, spec, steps=1)
    with_ = measure_point(DEEP, spec.with_(checkpointing="full"), steps=1)
    assert without.fits and with_.fits
    assert without.by_category["activations"] > without.by_category["weights_trainable"]  # guard
    assert with_.peak_bytes < 0.5 * without.peak_bytes
    assert with_.by_category["activations"] < 0.1 * without.by_category["activations"]


def test_model_states_by_category_full_adamw_fp32() -> None:
    spec = RunSpec(method="full", precision="fp32", device="cpu", batch=1, seq=16)
    r = measure_point(SMALL, spec, steps=1)
    model = build_model(SMALL, spec)
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    assert r.by_category["weights_trainable"] == 4 * n  # fp32, every parameter trains
    # the peak comes after the first step, so AdamW's state is alive: 8 B per parameter + a 4-byte step each
    assert r.by_category["optimizer"] == 8 * n + 4 * len(params)
    assert r.step_seconds is not None and r.step_seconds > 0 and len(r.step_times) == 1


def test_lora_trainable_bytes_match_peft() -> None:
    spec = RunSpec(method="lora", rank=8, targets=("all-linear",), precision="bf16", device="cpu", batch=1,
                   seq=16)
    r = measure_point(SMALL, spec, steps=1)
    model = build_model(SMALL, spec)
    trainable, total = model.get_nb_trainable_parameters()  # PEFT's own count
    assert r.by_category["weights_trainable"] == 4 * trainable  # adapters are fp32 (autocast_adapter_dtype)
    assert r.by_category["weights_frozen"] >= 2 * (total - trainable)  # bf16 base (+ fp32 rotary buffer)


def test_out_of_memory_is_a_result() -> None:
    spec = RunSpec(method="lora", precision="fp32", device="cpu", batch=8, seq=64)
    r = measure_point(SMALL, spec, steps=1, memory_limit=3_000_000)
    assert not r.fits
    assert r.peak_bytes is None
    assert "does not fit at batch 8" in (r.error or "")
    small = measure_point(SMALL, spec.with_(batch=1), steps=1, memory_limit=3_000_000)
    assert small.fits and small.peak_bytes is not None and small.peak_bytes <= 3_000_000


def test_sweep_goes_on_after_oom_and_bisects_the_max_batch() -> None:
    from memfit.measure.sweep import run_sweep

    spec = RunSpec(method="lora", precision="fp32", device="cpu", seq=64)
    limit = 3_000_000
    result = run_sweep(SMALL, spec, model="tiny", batches=[1, 4], seqs=[64], checkpointing=["none", "full"],
                       device="cpu", steps=1, memory_limit=limit, max_batch=True, isolate=False)
    fits = {(r.batch, r.checkpointing): r.fits for r in result.runs}
    assert fits == {(1, "none"): True, (4, "none"): False, (1, "full"): True, (4, "full"): True}
    (trade,) = result.trades  # batch 1 measured both ways
    assert trade.saved_bytes > 0
    mb = result.max_batch
    assert mb is not None and mb.checkpointing == "full" and mb.max_batch >= 4
    # the oracle: measured directly, the found batch fits and the next one does not
    full = spec.with_(checkpointing="full")
    assert measure_point(SMALL, full.with_(batch=mb.max_batch), steps=1, memory_limit=limit).fits
    assert not measure_point(SMALL, full.with_(batch=mb.max_batch + 1), steps=1, memory_limit=limit).fits
    assert result.to_dict()["max_batch"]["max_batch"] == mb.max_batch
