"""``memfit measure``: exit codes, the JSON's key figures, the OOM row, the plot; bad input as one red line."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memfit.cli import main  # noqa: E402
from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate import RunSpec  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))  # viz_replay: the viewer's replay

CONFIG = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=256)


@pytest.fixture()
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def test_measure_cli_json_in_a_subprocess(config_path: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "peak.png"
    snapshot = tmp_path / "step.pickle"
    rc = main(["measure", str(config_path), "--batch", "1", "--seq", "64", "--device", "cpu", "--precision",
               "fp32", "--method", "lora", "--memory-limit", "3000000B", "--steps", "1", "--plot", str(plot),
               "--snapshot", str(snapshot), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    (one,) = out["runs"]
    assert (one["batch"], one["seq"], one["fits"]) == (1, 64, True)
    # the fresh subprocess measured what this process measures for the same point
    here = measure_point(CONFIG, RunSpec(method="lora", precision="fp32", device="cpu", batch=1, seq=64), steps=1)
    assert one["peak_bytes"] == here.peak_bytes
    assert one["by_category"] == {str(k): v for k, v in here.by_category.items()}
    assert one["step_seconds"] > 0 and one["tokens_per_second"] > 0
    assert out["peak_vs_batch_headline"] is None and out["peak_vs_batch"] == []  # one batch size: no line
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # memory over the tracked steps, from the worker: its highest point is the point's peak, by category
    assert out["timeline_run"] == {"index": 0, "batch": 1, "seq": 64, "checkpointing": "none"}
    assert "timeline" not in one and 10 < len(out["timeline"]) <= 2000
    top = max(out["timeline"], key=lambda p: sum(p["bytes_by_category"].values()))
    assert sum(top["bytes_by_category"].values()) == one["peak_bytes"]
    assert top["bytes_by_category"] == {k: v for k, v in one["by_category"].items() if v}
    # and the snapshot the worker wrote replays (as the viewer does) to the same peak
    from viz_replay import replay  # type: ignore[import-not-found]

    assert replay(pickle.loads(snapshot.read_bytes())) == one["peak_bytes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "peak.png", "step.pickle"]


@pytest.mark.parametrize(("args", "message"), [
    (["--batch", "0"], "--batch values must be positive"),
    (["--batch", "two"], "comma-separated positive integers"),
    (["--checkpointing", "chen"], "--checkpointing must be one of"),
    (["--method", "qlora"], "needs bitsandbytes and CUDA"),
    (["--seq", "4096"], "longer than the model's 512 positions"),
])
def test_measure_cli_bad_input_is_one_red_line(config_path: Path, args: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["measure", str(config_path), "--device", "cpu", *args])
    err = capsys.readouterr().err
    assert rc == 1
    assert message in err
    assert "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_measure_cli_cuda_asked_but_absent(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["measure", str(config_path), "--device", "cuda"])
    assert rc == 1
    assert "use --device cpu" in capsys.readouterr().err


from bad_configs import BAD_CONFIGS, BAD_IDS  # noqa: E402


@pytest.mark.parametrize(("name", "config", "message"), BAD_CONFIGS, ids=BAD_IDS)
def test_measure_refuses_invalid_configs_before_building(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, name: str, config: dict,
                                                         message: str) -> None:
    """The estimate's boundary, in measure: one red line before any worker starts or model is built."""
    import memfit.measure.sweep as sweep

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("measure ran an invalid config")

    monkeypatch.setattr(sweep, "measure_in_subprocess", no_run)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["measure", str(path), "--device", "cpu", "--batch", "1", "--seq", "16"]) == 1
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_config", no_run)
    with pytest.raises(MemfitError, match="must be|not divisible|does not divide|more than|memfit accepts"):
        measure_point(config, RunSpec(method="full", precision="fp32", batch=1, seq=16, device="cpu"), steps=0)


def test_measure_refuses_a_modules_to_save_name_no_module_has(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt2 has no embed_tokens: PEFT would silently train nothing extra (measure ran it before)."""
    import memfit.measure.sweep as sweep

    gpt2 = tiny_config("gpt2", layers=1, hidden=64, heads=4, vocab=256)
    monkeypatch.setattr(sweep, "measure_in_subprocess", lambda *a, **k: pytest.fail("started a worker"))
    (tmp_path / "config.json").write_text(json.dumps(gpt2))
    assert main(["measure", str(tmp_path), "--modules-to-save", "embed_tokens", "--device", "cpu"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "embed_tokens matches no module of this gpt2 model" in err and "transformer.wte, lm_head" in err
    with pytest.raises(MemfitError, match="embed_tokens matches no module of this gpt2 model"):
        measure_point(gpt2, RunSpec(modules_to_save=("embed_tokens",), batch=1, seq=16, device="cpu"), steps=0)


def test_measure_refuses_an_existing_snapshot_before_measuring(config_path: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "step.pickle"
    existing.write_bytes(b"mine")
    rc = main(["measure", str(config_path), "--device", "cpu", "--snapshot", str(existing)])
    err = capsys.readouterr().err
    assert rc == 1 and "exists: pass --force" in err and "--snapshot" in err and "Traceback" not in err
    assert existing.read_bytes() == b"mine"
