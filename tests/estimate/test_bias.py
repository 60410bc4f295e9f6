"""``--bias all`` / ``--bias lora_only`` (PEFT 0.21.2 ``LoraConfig.bias``, ``_mark_only_adapters_as_trainable``:
every parameter named ``*.bias`` trains, or the LoRA layers' biases): trainable counts equal PEFT's own on the meta
device for models with biases (Qwen2's q/k/v, GPT-2's Conv1D and LayerNorms, Pythia, OPT, Phi's lm_head); the
biases' states leave the frozen weights (the same tensors) and join the trained ones (agreement rows:
tests/validate/test_peft_rows.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_targets, peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params, model_states

CASES = [
    ("qwen2.5-0.5b", (), "lora_only"),
    ("qwen2.5-0.5b", ("all-linear",), "all"),
    ("gpt2", (), "all"),
    ("gpt2", ("c_fc",), "lora_only"),
    ("pythia-1.4b", (), "all"),
    ("opt-1.3b", (), "all"),
    ("phi-2", ("q_proj", "v_proj"), "all"),
]


@pytest.mark.parametrize("name,targets,bias", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], bias: str) -> None:
    config = two_layers(name)
    expected = peft_trainable(config, r=8, target_modules=peft_targets(targets), bias=bias)
    spec = RunSpec(method="lora", rank=8, targets=targets, bias=bias)  # type: ignore[arg-type]
    shape = ModelShape.from_hf_config(config)
    assert lora_trainable_params(shape, spec) == expected
    assert model_states(shape, spec).trainable_params == expected
    assert lora_trainable_params(shape, spec.with_(bias="none")) < expected


def test_qwen_worked() -> None:
    """Qwen2.5-0.5B (24 layers, q 896, k and v 128 with biases), PEFT's default q_proj, v_proj: lora_only trains
    (896 + 128) * 24 = 24,576 biases, all (896 + 128 + 128) * 24 = 27,648 (RMSNorm has none); bf16, each moves
    2 bytes from the frozen weights to the trained ones and adds a 2-byte gradient and two 2-byte AdamW moments."""
    shape = lookup("qwen2.5-0.5b").shape
    base = model_states(shape, RunSpec(method="lora"))
    for bias, n, tensors in (("lora_only", 24_576, 48), ("all", 27_648, 72)):
        st = model_states(shape, RunSpec(method="lora", bias=bias))  # type: ignore[arg-type]
        assert st.trainable_params - base.trainable_params == n
        assert base.weights_frozen - st.weights_frozen == 2 * n
        assert st.weights_trainable - base.weights_trainable == 2 * n
        assert st.gradients - base.gradients == 2 * n
        assert st.optimizer - base.optimizer == 4 * n + 512 * tensors


def test_refused_and_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memfit.cli import main
    from memfit.configs import import_configs, to_spec

    with pytest.raises(MemfitError, match="--bias"):
        RunSpec(method="lora", bias="some")  # type: ignore[arg-type]
    with pytest.raises(MemfitError, match="--method full trains every bias"):
        RunSpec(method="full", bias="all")
    assert main(["estimate", "qwen2.5-0.5b", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)["trainable_params"]
    assert main(["estimate", "qwen2.5-0.5b", "--bias", "lora_only", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainable_params"] - base == 24_576
    data = json.loads((Path(__file__).parents[1] / "configs" / "files" / "adapter_config.json").read_text())
    data["bias"] = "all"
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.bias == "all"
    assert next(r for r in si.rows if r.field == "bias").status == "setting"
