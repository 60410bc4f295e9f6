"""Peak against batch and the checkpointing trade: least squares and the advice, worked by hand."""

from __future__ import annotations

import pytest

from memfit.estimate import ModelShape
from memfit.measure.regression import (
    CheckpointingTrade,
    TradeAdvice,
    checkpointing_trades,
    least_squares,
    peak_vs_batch,
)
from memfit.measure.result import PointResult
from memfit.report.measure import trade_verdict


def _point(batch: int, peak: int | None, *, seq: int = 128, ckpt: str = "none", seconds: float = 1.0,
           fits: bool = True) -> PointResult:
    return PointResult(batch=batch, seq=seq, checkpointing=ckpt, device="cpu", fits=fits, peak_bytes=peak,
                       step_seconds=seconds)


def test_least_squares_by_hand() -> None:
    # y = 2x + 6 exactly
    assert least_squares([2, 4, 8], [10, 14, 22]) == (2.0, 6.0, 1.0)
    # x = 1,2,3; y = 1,3,2: mean x 2, mean y 2, Sxy = 1, Sxx = 2 -> slope 0.5, intercept 1;
    # residuals -0.5, 1, -0.5 -> SS_res 1.5; SS_tot 2 -> R^2 0.25
    slope, intercept, r2 = least_squares([1, 2, 3], [1, 3, 2])
    assert (slope, intercept) == (0.5, 1.0)
    assert r2 == pytest.approx(0.25)


def test_activation_constant_per_layer_token_hidden() -> None:
    """slope 2,000,000 B per sample over L=4 layers x s=128 tokens x h=256 hidden = 131,072:
    2,000,000 / 131,072 = 15.2587890625 B per layer x token x hidden."""
    shape = ModelShape.from_hf_config({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
                                       "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 100})
    runs = [_point(2, 10_000_000), _point(4, 14_000_000), _point(8, 22_000_000), _point(16, None, fits=False)]
    (line,) = peak_vs_batch(runs, shape)
    assert line.slope_bytes_per_sample == 2_000_000
    assert line.intercept_bytes == 6_000_000
    assert line.batches == (2, 4, 8)  # the OOM point is left out of the line
    assert line.bytes_per_layer_token_hidden == 15.2587890625
    assert line.to_dict()["rule_of_thumb_bytes"] == 20


def test_trade_advice_and_its_verdict() -> None:
    """1000 B -> 390 B: saves 610 B = 61% for 1.27x the time: 0.61 >= 0.27, take it. 1000 -> 980: 2% < 5%, skip.
    1000 -> 850 for 2x the time: 15% saved < 100% more time and under 20%: only to make the run fit."""
    runs = [_point(4, 1000, seconds=1.0), _point(4, 390, ckpt="full", seconds=1.27), _point(8, 2000)]
    (trade,) = checkpointing_trades(runs)
    assert (trade.saved_bytes, trade.slowdown) == (610, pytest.approx(1.27))
    assert trade.advice == TradeAdvice.TAKE and trade.to_dict()["advice"] == "take"
    assert "verdict" not in trade.to_dict()  # no prose in the data: the report writes it
    assert trade_verdict(trade.fraction_saved, trade.slowdown, trade.advice) == "saves 61% for 27% more time: take it"
    tiny = CheckpointingTrade(batch=1, seq=8, peak_without=1000, peak_with=980, seconds_without=1.0,
                              seconds_with=1.3)
    assert tiny.advice == TradeAdvice.SKIP
    assert trade_verdict(tiny.fraction_saved, tiny.slowdown, tiny.advice) == (
        "saves 2% for 30% more time: skip it, activations are not the cost here")
    costly = CheckpointingTrade(batch=1, seq=8, peak_without=1000, peak_with=850, seconds_without=1.0,
                                seconds_with=2.0)
    assert costly.advice == TradeAdvice.ONLY_TO_FIT
    assert trade_verdict(costly.fraction_saved, costly.slowdown, costly.advice) == (
        "saves 15% for 100% more time: take it only if the run does not fit without it")
