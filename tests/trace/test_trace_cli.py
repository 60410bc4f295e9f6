"""``memfit trace``: exit code and the key figure, and one red line for a setting trace cannot run."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from memfit.cli import main  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.measure.model import tiny_config  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402


def test_trace_json_reports_the_engine_peak(tmp_path, capsys) -> None:
    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = main(["trace", str(tmp_path / "config.json"), "--batch", "2", "--seq", "32", "--device", "cpu",
                 "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    expected = trace_step(cfg, RunSpec(batch=2, seq=32, device="cpu"))
    assert out["peak_bytes"] == expected.peak_bytes
    assert sum(out["components"].values()) == out["peak_bytes"]
    assert out["engine"] == "trace" and out["saved_for_backward"]["total"] > 0


def test_trace_unsupported_setting_is_one_line(tmp_path, capsys) -> None:
    cfg = tiny_config("llama", layers=1, hidden=32, heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = main(["trace", str(tmp_path / "config.json"), "--method", "qlora"])
    err = capsys.readouterr().err
    assert code == 1
    assert "qlora" in err and "Traceback" not in err


def test_trace_runs_an_architecture_the_estimate_does_not_model(tmp_path, capsys) -> None:
    """StarCoder2 is not in the estimate's shape models; trace runs transformers' own code for it."""
    cfg = {"model_type": "starcoder2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "max_position_embeddings": 256,
           "eos_token_id": 0, "bos_token_id": 0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = main(["trace", str(tmp_path), "--targets", "q_proj,v_proj", "--batch", "2", "--seq", "32",
                 "--device", "cpu", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    expected = trace_step(cfg, RunSpec(targets=("q_proj", "v_proj"), batch=2, seq=32, device="cpu"))
    assert out["peak_bytes"] == expected.peak_bytes > 0
    assert out.get("estimate") is None  # no shape model: no estimate column, the trace stands alone


def test_trace_bad_config_is_one_line(tmp_path, capsys) -> None:
    (tmp_path / "config.json").write_text("{not json")
    assert main(["trace", str(tmp_path / "config.json")]) == 1
    assert "not valid JSON" in capsys.readouterr().err


T5 = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 64, "d_ff": 128, "d_kv": 16,
      "num_heads": 4, "num_layers": 2, "num_decoder_layers": 2, "vocab_size": 300, "is_encoder_decoder": True}


def test_an_encoder_decoder_is_named_not_blamed_on_attention(tmp_path, capsys) -> None:
    """Issue 21.17: a T5 config was told "try --attention eager"; transformers 5.24.0 has no AutoModelForCausalLM
    class for t5 (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), whatever the attention kernel."""
    (tmp_path / "config.json").write_text(json.dumps(T5))
    for command in ("trace", "estimate"):
        code = main([command, str(tmp_path / "config.json"), "--seq", "32", "--device", "cpu"])
        err = " ".join(capsys.readouterr().err.split())
        assert code == 1
        assert "encoder-decoder" in err and "not supported" in err, err
        assert "--attention" not in err and "memfit trace` runs" not in err, err


def test_trace_check_and_headroom(tmp_path, capsys) -> None:
    """--check on trace: exit 3 when reserved + headroom exceeds --gpu (the rule estimate prints)."""
    cfg = tiny_config("llama", layers=1, hidden=32, heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    base = ["trace", str(tmp_path / "config.json"), "--batch", "1", "--seq", "16", "--device", "cpu"]
    assert main([*base, "--gpu", "1GiB", "--check"]) == 0
    assert main([*base, "--gpu", "16KiB", "--check"]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "does not fit: peak" in out and "headroom" in out
