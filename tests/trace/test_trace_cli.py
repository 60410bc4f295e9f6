"""``memfit trace``: exit code and the key figure, and one red line for a setting trace cannot run."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from memfit.cli import main  # noqa: E402
from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402


def test_trace_json_reports_the_engine_peak(tmp_path, capsys) -> None:
    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    snapshot = tmp_path / "step.pickle"
    code = main(["trace", str(tmp_path / "config.json"), "--batch", "2", "--seq", "32", "--device", "cpu",
                 "--snapshot", str(snapshot), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # the key figure against a real CPU step of the same spec (real tensors): the trace is byte-exact on CPU
    real = measure_point(cfg, RunSpec(batch=2, seq=32, device="cpu"), steps=0, warmup=0)
    assert out["peak_bytes"] == real.peak_bytes
    assert out["engine"] == "trace" and out["saved_for_backward"]["total"] > 0
    top = max(out["timeline"], key=lambda p: sum(p["bytes_by_category"].values()))
    assert sum(top["bytes_by_category"].values()) == real.peak_bytes
    assert snapshot.read_bytes()[:2] == b"\x80\x04" and "pytorch.org/memory_viz" in captured.err
    # a second run does not replace it without --force: one red line, before any tracing
    assert main(["trace", str(tmp_path / "config.json"), "--snapshot", str(snapshot)]) == 1
    assert "exists: pass --force" in capsys.readouterr().err


def test_trace_unsupported_setting_is_one_line(tmp_path, capsys) -> None:
    cfg = tiny_config("llama", layers=1, hidden=32, heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = main(["trace", str(tmp_path / "config.json"), "--loss", "chunked"])
    err = capsys.readouterr().err
    assert code == 1
    assert "chunked" in err and "Traceback" not in err


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
    real = measure_point(cfg, RunSpec(targets=("q_proj", "v_proj"), batch=2, seq=32, device="cpu"), steps=0,
                         warmup=0)
    assert out["peak_bytes"] == real.peak_bytes > 0
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


from bad_configs import BAD_CONFIGS, BAD_IDS  # noqa: E402


@pytest.mark.parametrize(("name", "config", "message"), BAD_CONFIGS, ids=BAD_IDS)
def test_trace_refuses_invalid_configs_before_building(tmp_path, capsys, monkeypatch, name: str, config: dict,
                                                       message: str) -> None:
    """The estimate's boundary, in trace: one red line, before any model is built (these crashed inside
    transformers or torch with a traceback, or traced a degenerate model)."""
    import memfit.trace.engine as engine

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("trace built a model for an invalid config")

    monkeypatch.setattr(engine, "fake_model", no_build)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["trace", str(path), "--device", "cpu", "--batch", "1", "--seq", "16"]) == 1
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err
    with pytest.raises(MemfitError, match="must be|not divisible|does not divide|more than|memfit accepts"):
        trace_step(config, RunSpec(batch=1, seq=16, device="cpu"))  # the library entry point checks too


GPT2_TINY = tiny_config("gpt2", layers=2, hidden=64, heads=4, vocab=300)


def test_trace_refuses_a_modules_to_save_name_no_module_has(tmp_path, capsys, monkeypatch) -> None:
    """gpt2 has no embed_tokens: PEFT would silently train nothing extra; trace now says so, before building."""
    import memfit.trace.engine as engine

    monkeypatch.setattr(engine, "fake_model", lambda *a, **k: pytest.fail("built a model"))
    (tmp_path / "config.json").write_text(json.dumps(GPT2_TINY))
    assert main(["trace", str(tmp_path), "--modules-to-save", "embed_tokens", "--device", "cpu"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "embed_tokens matches no module of this gpt2 model" in err and "transformer.wte, lm_head" in err


def test_trace_checks_modules_to_save_on_the_real_model_for_other_architectures() -> None:
    """StarCoder2 has no shape model: the names are checked against the real module tree, same message."""
    cfg = {"model_type": "starcoder2", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "max_position_embeddings": 256,
           "eos_token_id": 0, "bos_token_id": 0}
    spec = RunSpec(targets=("q_proj",), modules_to_save=("wte",), batch=1, seq=16, device="cpu")
    with pytest.raises(MemfitError, match=r"wte matches no module of this starcoder2 model .*model\.embed_tokens"):
        trace_step(cfg, spec)


def test_trace_trains_gpt2s_real_embedding_name_as_the_estimate_counts_it() -> None:
    """--modules-to-save wte (GPT-2's name, refused by the estimate before): the trace's trainable bytes (PEFT's
    copy of transformer.wte, 300 x 64 fp32, plus the adapters) equal the estimate's."""
    from memfit.estimate import ModelShape, estimate_memory

    spec = RunSpec(modules_to_save=("wte",), precision="fp32", batch=1, seq=16, device="cpu")
    traced = trace_step(GPT2_TINY, spec)
    est = estimate_memory(ModelShape.from_hf_config(GPT2_TINY), spec)
    adapters = 2 * 16 * (64 + 192) * 4  # 2 layers x c_attn: r=16 x (in 64 + out 192) x 4 B = 32,768
    assert traced.model_states["weights_trainable"] == est.model_states.weights_trainable == adapters + 300 * 64 * 4


BNB_STUB = '''"""Stands in for bitsandbytes 0.50 on a CPU with AVX512-BF16 and no `kernels` package: at import,
bitsandbytes.backends.cpu.ops logs this warning (the real text), which PEFT's import triggers."""
import logging
import types

logging.getLogger("bitsandbytes.backends.cpu.ops").warning(
    "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'. Please make sure "
    "you already `pip install kernels` and the kernels >= 0.11.1")
nn = types.SimpleNamespace()  # what PEFT probes (no Linear4bit: no 4-bit support)
'''


@pytest.mark.slow
def test_trace_stderr_has_no_third_party_import_noise_unless_verbose(tmp_path) -> None:
    """Issue 21 #18: every LoRA trace printed bitsandbytes' "Failed to load ... kernels" warning (PEFT imports
    bitsandbytes whenever it is installed), and transformers' special-token warnings for small configs."""
    import os
    import subprocess
    import sys

    (tmp_path / "bitsandbytes").mkdir()
    (tmp_path / "bitsandbytes" / "__init__.py").write_text(BNB_STUB)
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("gpt2", layers=1, hidden=32, heads=2, vocab=128)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env.pop("TRANSFORMERS_VERBOSITY", None)
    cmd = [sys.executable, "-m", "memfit.cli", "trace", str(tmp_path / "config.json"), "--device", "cpu",
           "--batch", "1", "--seq", "16", "--json"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "Failed to load" not in quiet.stderr and "bos_token_id" not in quiet.stderr
    assert json.loads(quiet.stdout)["peak_bytes"] > 0
    verbose = subprocess.run([*cmd, "--verbose"], capture_output=True, text=True, env=env, timeout=300)
    assert verbose.returncode == 0
    assert "Failed to load CPU gemm_4bit_forward" in verbose.stderr  # the stub was imported: not a vacuous pass
    assert "bos_token_id" in verbose.stderr
