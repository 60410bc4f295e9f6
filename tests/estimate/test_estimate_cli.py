"""`memfit estimate` and `memfit gpus` on the command line: exit codes, key figures, JSON keys."""

from __future__ import annotations

import json

import pytest

from memfit.cli import main


def test_rule_of_thumb_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--layers", "24", "--hidden", "2048", "--batch", "4", "--seq", "2048",
                 "--rule-of-thumb"])
    out = capsys.readouterr().out
    assert code == 0
    assert "8,053,063,680 B" in out and "8.05 GB" in out and "7.50 GiB" in out


def test_rule_of_thumb_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--layers", "32", "--hidden", "4096", "--batch", "2", "--seq", "4096",
                 "--rule-of-thumb", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["activation_bytes"] == 21_474_836_480


def test_estimate_cli_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "lesson-24x2048", "--batch", "4", "--seq", "2048", "--gpu", "24GiB", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("spec", "peak_bytes", "peak_phase", "components", "model_states", "reserved_bytes", "gpu_bytes",
                "fits"):
        assert key in d
    assert sum(d["components"].values()) == d["peak_bytes"]
    assert d["gpu_bytes"] == 24 * 1024**3
    assert d["spec"]["batch"] == 4 and d["spec"]["method"] == "lora"


def test_estimate_cli_table_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "llama-3.1-8b", "--method", "full", "--gpu", "T4", "--explain"])
    out = capsys.readouterr().out
    assert code == 0
    assert "does not fit" in out and "short by" in out
    assert "rule of thumb" in out


def test_estimate_cli_bad_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "gpt2", "--seq", "512", "--gpu", "H900"])
    assert code == 1
    err = capsys.readouterr().err
    assert "unknown GPU" in err and "Traceback" not in err


def test_estimate_cli_needs_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate"]) == 1
    assert "MODEL" in capsys.readouterr().err


def test_gpus_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {r["name"]: r["bytes"] for r in rows}
    assert by["A100-80GB"] == 85_899_345_920
    assert {"T4", "L4", "A10G", "RTX 3090", "RTX 4090", "A100-40GB", "H100-80GB", "H200"} <= set(by)
