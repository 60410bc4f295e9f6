"""``--config`` on estimate, fit, trace and measure: the import table for people, ``config_import`` in --json,
explicit flags over files, MODEL taken from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.configs import import_configs, to_spec

FILES = Path(__file__).parent / "files"


@pytest.mark.parametrize("command", ["estimate", "fit", "trace", "measure"])
def test_every_spec_command_takes_config(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert "--config" in capsys.readouterr().out


def test_estimate_json_carries_config_import(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--config", str(FILES / "axolotl_qlora.yml"), "--batch", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "meta-llama/Llama-3.1-8B"
    rows = d["config_import"]
    assert all({"file", "line", "field", "value", "setting", "status"} <= set(r) for r in rows)
    mbs = next(r for r in rows if r["field"] == "micro_batch_size")
    assert (mbs["line"], mbs["value"], mbs["setting"], mbs["status"]) == (37, 2, "batch", "setting")
    assert "--batch on the command line wins" in mbs["note"]
    assert d["spec"]["batch"] == 1 and d["spec"]["seq"] == 4096 and d["spec"]["method"] == "qlora"
    packing = next(r for r in rows if r["field"] == "sample_packing")
    assert packing["status"] == "NOT MODELLED"
    assert next(r for r in rows if r["field"] == "learning_rate")["status"] == "ignored"
    expected = to_spec(import_configs([FILES / "axolotl_qlora.yml"]), explicit={"batch": 1}).spec
    assert d["spec"] == expected.to_dict()


def test_estimate_table_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--config", str(FILES / "trl_full_deepspeed.yaml")]) == 0
    out = capsys.readouterr().out
    assert "read from" in out and "ds_zero3_offload.json" in out and "NOT MODELLED" in out
    assert "ignored (no memory effect)" in out and "peak (allocated)" in out


def test_fit_takes_the_world_size_from_accelerate(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fit", "llama-3.1-8b", "--config", str(FILES / "accelerate_fsdp.yaml"), "--method", "full",
                 "--gpu", "80GB", "--no-search", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"] == 4
    row = next(r for r in d["config_import"] if r["setting"] == "gpus")
    assert row["status"] == "setting" and row["memfit_value"] == 4
    assert main(["fit", "llama-3.1-8b", "--config", str(FILES / "accelerate_fsdp.yaml"), "--gpus", "2",
                 "--gpu", "80GB", "--no-search", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 2  # the flag wins


def test_model_missing_everywhere_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--config", str(FILES / "ds_zero2.json")]) == 1
    assert "a --config that names one" in capsys.readouterr().err


@pytest.fixture()
def tiny_run(tmp_path: Path) -> Path:
    """A TRL file naming a tiny local model: full fine-tune, fp32, batch 2 x 64 tokens, no checkpointing."""
    torch = pytest.importorskip("torch")
    del torch
    from memfit.runtime.build import tiny_config

    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2,
                                                              vocab=256)))
    run = tmp_path / "sft.yaml"
    run.write_text(f"model_name_or_path: {model}\ndataset_name: d\nmax_length: 64\nper_device_train_batch_size: 2\n"
                   "gradient_checkpointing: false\nbf16: false\nuse_cpu: true\n")
    return run


@pytest.mark.slow
def test_measure_reads_the_config(tiny_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """measure's own --batch / --seq sweeps take the config's values when not given."""
    assert main(["measure", "--config", str(tiny_run), "--steps", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (point,) = d["runs"]
    assert (point["batch"], point["seq"]) == (2, 64)
    assert any(r["field"] == "per_device_train_batch_size" for r in d["config_import"])


@pytest.mark.slow
def test_trace_reads_the_config(tiny_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--config", str(tiny_run), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["spec"]["batch"] == 2 and t["spec"]["device"] == "cpu" and t["config_import"]
