"""The advisor's time model and cost order: golden values worked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.advise import Cost, Setup, TimeModel, setup_cost, time_model_from_measurement
from memfit.errors import MemfitError
from memfit.estimate import RunSpec


def test_checkpointing_factor_is_one_extra_forward() -> None:
    # step = F + B with B = 2F; recomputing every block adds one F: (1 + 2 + 1) / (1 + 2)
    tm = TimeModel()
    assert tm.checkpointing("none") == 1.0
    assert tm.checkpointing("full") == pytest.approx(4 / 3)
    # segments of k or sqrt(L) blocks keep only their input and are all recomputed: the same extra forward
    assert tm.checkpointing("sqrt") == pytest.approx(4 / 3)
    assert tm.checkpointing("every-k") == pytest.approx(4 / 3)


def test_micro_batch_factor_by_hand() -> None:
    """T0 = 256 tokens of overhead per micro-step. Batch 8 -> 1 at seq 2048: (1 + 256/2048) / (1 + 256/16384) =
    1.125 / 1.015625 = 1.108. Batch 8 -> 2 at seq 1024: 1.125 / 1.03125 = 1.0909."""
    tm = TimeModel()
    assert round(tm.micro_batch(8 * 2048, 2048), 3) == 1.108
    assert round(tm.micro_batch(8 * 1024, 2 * 1024), 4) == 1.0909
    assert tm.micro_batch(4096, 4096) == 1.0
    assert tm.micro_batch(8192, 1024) > tm.micro_batch(8192, 4096) > 1.0


def test_measured_checkpoint_factor_from_trade_list(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"runs": [], "checkpointing_trade": [{"slowdown": 1.2}, {"slowdown": 1.3},
                                                                 {"slowdown": 1.5}]}))
    tm = time_model_from_measurement(f)
    assert tm.checkpoint_factor == pytest.approx(1.3)  # the median
    assert "measured" in tm.source
    assert tm.checkpointing("full") == pytest.approx(1.3)


def test_measured_checkpoint_factor_pairs_runs(tmp_path: Path) -> None:
    runs = [
        {"batch": 1, "seq": 128, "checkpointing": "none", "step_seconds": 2.0},
        {"batch": 1, "seq": 128, "checkpointing": "full", "step_seconds": 2.5},
        {"batch": 2, "seq": 128, "checkpointing": "none", "step_seconds": 4.0},
        {"batch": 2, "seq": 128, "checkpointing": "full", "step_seconds": 5.6},
        {"batch": 4, "seq": 128, "checkpointing": "none", "step_seconds": 8.0},  # unpaired: ignored
    ]
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"runs": runs}))
    assert time_model_from_measurement(f).checkpoint_factor == pytest.approx((1.25 + 1.4) / 2)


@pytest.mark.parametrize("content, needle", [
    ("not json", "not a JSON"),
    (json.dumps({"runs": [{"batch": 1, "seq": 8, "checkpointing": "none", "step_seconds": 1.0}]}), "both"),
    (json.dumps([1, 2]), "JSON object"),
])
def test_bad_measurement_names_the_fix(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "m.json"
    f.write_text(content)
    with pytest.raises(MemfitError, match=needle):
        time_model_from_measurement(f)
    with pytest.raises(MemfitError, match="no such file"):
        time_model_from_measurement(tmp_path / "missing.json")


def test_cost_order_follows_the_lesson() -> None:
    time_only = Cost(time_factor=1.4)
    task = Cost(time_factor=1.0, truncation=0.05)
    quality = Cost(time_factor=1.0, quantised=True)
    capacity = Cost(time_factor=1.0, rank_halvings=1.0)
    ranked = sorted([capacity, quality, task, time_only], key=Cost.key)
    assert ranked == [time_only, task, quality, capacity]
    assert [c.gives_up for c in ranked] == ["time", "task", "quality", "capacity"]
    # among time-only costs, the faster wins
    assert sorted([Cost(time_factor=1.33), Cost(time_factor=1.1)], key=Cost.key)[0].time_factor == 1.1


def test_setup_cost_by_hand() -> None:
    """b8 x s2048 -> checkpointing full, b2 x accum 4, qlora, zero3 over 8 GPUs, rank 64 -> 16: time 4/3 x
    ((2 x 4 x 2048 + 4 x 256) / (8 x 2048 + 256) = 17,408 / 16,640 = 1.04615) x 1.3 x 1.1 = 1.99467; two rank
    halvings; quantised; nothing truncated."""
    a = Setup(spec=RunSpec(rank=64, batch=8, seq=2048, gpus=8))
    b = a.with_(checkpointing="full", batch=2, grad_accum=4, method="qlora", sharding="zero3", rank=16)
    cost = setup_cost(a, b, time_model=TimeModel(), data=None)
    assert cost.time_factor == pytest.approx(4 / 3 * 17_408 / 16_640 * 1.3 * 1.1)
    assert round(cost.time_factor, 5) == 1.99467
    assert (cost.rank_halvings, cost.quantised, cost.full_to_adapter, cost.truncation) == (2.0, True, False, 0.0)
    assert cost.gives_up == "capacity"
    # without data a shorter sequence gives up its share of the sequence: 2048 -> 1536 is 1/4
    assert setup_cost(a, a.with_(seq=1536), time_model=TimeModel(), data=None).truncation == 0.25


def test_a_measurement_of_another_model_or_device_is_refused(tmp_path: Path, capsys) -> None:
    """Issue 21.14: fit --measurement applied a slowdown measured on another model or device unchecked."""
    from memfit.cli import main
    from memfit.estimate import resolve_model

    runs = [{"batch": 1, "seq": 64, "checkpointing": "none", "step_seconds": 1.0},
            {"batch": 1, "seq": 64, "checkpointing": "full", "step_seconds": 1.5}]
    shape = resolve_model("llama-2-7b")

    def file(**keys: object) -> Path:
        f = tmp_path / f"m{len(list(tmp_path.iterdir()))}.json"
        f.write_text(json.dumps({**keys, "runs": runs}))
        return f

    same = file(model="llama-2-7b", device="cuda")
    assert time_model_from_measurement(same, shape=shape, device="cuda").checkpoint_factor == 1.5
    with pytest.raises(MemfitError, match="measured gpt2, not llama-2-7b"):
        time_model_from_measurement(file(model="gpt2", device="cuda"), shape=shape, device="cuda")
    with pytest.raises(MemfitError, match="measured on cpu; this run is --device cuda"):
        time_model_from_measurement(file(model="llama-2-7b", device="cpu"), shape=shape, device="cuda")
    with pytest.raises(MemfitError, match="does not say which model"):
        time_model_from_measurement(file(device="cuda"), shape=shape, device="cuda")
    # the same architecture under another name (a config file of it) is the same model
    config = tmp_path / "config.json"
    from memfit.estimate import resolve_config

    config.write_text(json.dumps(resolve_config("llama-2-7b")))
    assert time_model_from_measurement(file(model=str(config), device="cuda"), shape=shape,
                                       device="cuda").checkpoint_factor == 1.5
    # on the command line: one red line, exit 1
    other = file(model="qwen2.5-0.5b", device="cpu")
    assert main(["fit", "llama-2-7b", "--gpu", "24GiB", "--measurement", str(other), "--no-search"]) == 1
    assert "--measurement" in capsys.readouterr().err
