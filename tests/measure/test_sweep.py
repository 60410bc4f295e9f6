"""The sweep's arithmetic: least squares by hand, the activation constant, the trade, bisection."""

from __future__ import annotations

import pytest

from memfit.estimate import ModelShape, RunSpec
from memfit.measure.result import PointResult
from memfit.measure.sweep import (
    CheckpointingTrade,
    batch_fits,
    bisect_max_batch,
    checkpointing_trades,
    linear_fit,
)


def _point(batch: int, peak: int | None, *, seq: int = 128, ckpt: str = "none", seconds: float = 1.0,
           fits: bool = True) -> PointResult:
    return PointResult(batch=batch, seq=seq, checkpointing=ckpt, device="cpu", fits=fits, peak_bytes=peak,
                       step_seconds=seconds)


def test_linear_fit_by_hand() -> None:
    # y = 2x + 6 exactly
    assert linear_fit([2, 4, 8], [10, 14, 22]) == (2.0, 6.0, 1.0)
    # x = 1,2,3; y = 1,3,2: mean x 2, mean y 2, Sxy = 1, Sxx = 2 -> slope 0.5, intercept 1;
    # residuals -0.5, 1, -0.5 -> SS_res 1.5; SS_tot 2 -> R^2 0.25
    slope, intercept, r2 = linear_fit([1, 2, 3], [1, 3, 2])
    assert (slope, intercept) == (0.5, 1.0)
    assert r2 == pytest.approx(0.25)


def test_activation_constant_per_layer_token_hidden() -> None:
    shape = ModelShape.from_hf_config({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
                                       "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 100})
    runs = [_point(2, 10_000_000), _point(4, 14_000_000), _point(8, 22_000_000), _point(16, None, fits=False)]
    (fit,) = batch_fits(runs, shape)
    assert fit.slope_bytes_per_sample == 2_000_000
    assert fit.intercept_bytes == 6_000_000
    assert fit.batches == (2, 4, 8)  # the OOM point is left out of the fit
    assert fit.bytes_per_layer_token_hidden == pytest.approx(2_000_000 / (4 * 128 * 256))


def test_trade_and_verdicts() -> None:
    runs = [_point(4, 1000, seconds=1.0), _point(4, 390, ckpt="full", seconds=1.27), _point(8, 2000)]
    (trade,) = checkpointing_trades(runs)
    assert (trade.saved_bytes, trade.slowdown) == (610, pytest.approx(1.27))
    assert trade.verdict == "saves 61% for 27% more time: take it"
    tiny = CheckpointingTrade(batch=1, seq=8, peak_without=1000, peak_with=980, seconds_without=1.0,
                              seconds_with=1.3)
    assert tiny.verdict.endswith("skip it, activations are not the cost here")
    costly = CheckpointingTrade(batch=1, seq=8, peak_without=1000, peak_with=850, seconds_without=1.0,
                                seconds_with=2.0)
    assert costly.verdict.endswith("take it only if the run does not fit without it")


@pytest.mark.parametrize("start", [1, 4, 13, 14, 20, 500])
def test_bisection_finds_the_largest_fitting_batch(start: int) -> None:
    limit = 13  # batches up to 13 fit

    def measure(spec: RunSpec) -> PointResult:
        return _point(spec.batch, spec.batch * 10 if spec.batch <= limit else None, fits=spec.batch <= limit)

    found, probes = bisect_max_batch(measure, RunSpec(device="cpu"), start=start)
    assert found == 13
    assert len(probes) == len({p.batch for p in probes}) <= 12  # each batch measured once, few probes


def test_bisection_reports_zero_when_batch_one_does_not_fit() -> None:
    found, probes = bisect_max_batch(lambda s: _point(s.batch, None, fits=False), RunSpec(device="cpu"), start=8)
    assert found == 0
    assert [p.batch for p in probes] == [8, 4, 2, 1]


def test_bisection_reuses_points_already_measured() -> None:
    calls: list[int] = []

    def measure(spec: RunSpec) -> PointResult:
        calls.append(spec.batch)
        return _point(spec.batch, spec.batch * 10 if spec.batch <= 5 else None, fits=spec.batch <= 5)

    known = {4: _point(4, 40), 8: _point(8, None, fits=False)}
    found, probes = bisect_max_batch(measure, RunSpec(device="cpu"), start=4, known=known)
    assert found == 5
    assert 4 not in calls and 8 not in calls  # taken from the sweep, not measured again
    assert calls == [6, 5]
