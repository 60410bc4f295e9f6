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
    """The lesson's model (L=24, h=2048, 32 heads, 4 KV heads of 64, MLP 5632, V=32,000, untied): P = 2 x
    65,536,000 (embeddings, lm_head) + 24 x 44,044,288 (q, o 2048x2048; k, v 2048x256; 3 x 2048x5632; two
    norms) + 2048 = 1,188,136,960. LoRA r16 on q, v: 24 x 16 x ((2048 + 2048) + (2048 + 256)) = 2,457,600
    fp32 params. At the loss's backward (b=4, s=2048, T=8,192): frozen 2P = 2,376,273,920, adapter 9,830,400,
    AdamW 19,660,800 + the fused kernel's 96 step counters on the GPU (24 x 2 x (A, B), one 512-byte block each:
    49,152) = 19,709,952, logits 3 x T x V x 4 + T x 8 + 4 = 3,145,793,540, inputs 2 x T x 8 = 131,072."""
    code = main(["estimate", "lesson-24x2048", "--batch", "4", "--seq", "2048", "--gpu", "24GiB", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("spec", "peak_bytes", "peak_phase", "components", "model_states", "reserved_bytes", "gpu_bytes",
                "fits"):
        assert key in d
    c = d["components"]
    by_hand = {"weights_frozen": 2_376_273_920, "weights_trainable": 9_830_400, "gradients": 0,
               "optimizer": 19_709_952, "logits": 3_145_793_540, "temporaries": 0, "inputs": 131_072}
    assert {k: c[k] for k in by_hand} == by_hand and d["peak_moment"] == "backward: loss"
    assert d["peak_bytes"] == sum(by_hand.values()) + c["activations"]
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
