"""The advisor's time model, cost order, headroom and data profile: golden values worked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memfit.advise import Cost, DataProfile, Headroom, TimeModel, time_model_from_measurement
from memfit.errors import MemfitError


def test_checkpointing_factor_is_one_extra_forward() -> None:
    # step = F + B with B = 2F; recomputing every block adds one F: (1 + 2 + 1) / (1 + 2)
    tm = TimeModel()
    assert tm.checkpointing("none") == 1.0
    assert tm.checkpointing("full") == pytest.approx(4 / 3)
    # segments of k or sqrt(L) blocks keep only their input and are all recomputed: the same extra forward
    assert tm.checkpointing("sqrt") == pytest.approx(4 / 3)
    assert tm.checkpointing("every-k") == pytest.approx(4 / 3)


def test_micro_batch_factor_by_hand() -> None:
    tm = TimeModel()
    # batch 8 -> 2 at seq 1024, T0 = 256 tokens: (1 + 256/2048) / (1 + 256/8192)
    assert tm.micro_batch(8 * 1024, 2 * 1024) == pytest.approx((1 + 256 / 2048) / (1 + 256 / 8192))
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


def test_headroom_parse_and_budget() -> None:
    gib = 1024**3
    assert Headroom.parse("10%").budget(24 * gib) == int(24 * gib * 0.9)
    assert Headroom.parse("0.25").budget(80 * gib) == 60 * gib
    assert Headroom.parse("2GiB").budget(24 * gib) == 22 * gib
    assert Headroom.parse("0").budget(1000) == 1000
    for bad in ("150%", "1.5", "lots"):
        with pytest.raises(MemfitError, match="--headroom"):
            Headroom.parse(bad)


def test_data_profile_truncation_and_packing_ratio() -> None:
    lengths = [100] * 90 + [900] * 10
    prof = DataProfile(source="x", lengths=tuple(lengths), p95=900, recommended_seq_len=960, batch=4, seq_len=1024,
                       waste_random=0.5, waste_packed=0.1, peak_len=900)
    assert prof.truncated(512) == 10
    assert prof.truncated_share(512) == pytest.approx(0.1)
    assert prof.truncated(900) == 0  # an example of exactly seq tokens is not cut
    assert prof.no_cut_seq_len() == 960  # 900 rounded up to a multiple of 64
    # same real tokens: 1 random row carries 0.5 real, a packed row 0.9
    assert prof.packing_ratio == pytest.approx(0.5 / 0.9)
    assert math.isclose(prof.to_dict()["padding_waste"]["packed"], 0.1)


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
