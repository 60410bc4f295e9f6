"""``--exclude-modules`` (PEFT 0.21.2 ``LoraConfig.exclude_modules``, a list): trainable counts equal PEFT's own on
the meta device; layer-specific exclusions and names no module has are refused by the estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params

CASES = [
    ("llama-3.2-1b", ("all-linear",), ("k_proj",)),
    ("llama-3.2-1b", ("all-linear",), ("mlp.down_proj", "o_proj")),
    ("qwen2.5-0.5b", ("q_proj", "k_proj", "v_proj"), ("self_attn.k_proj",)),
    ("gpt2", ("all-linear",), ("c_fc",)),
]



def test_llama2_7b_worked() -> None:
    """r 16, targets q_proj, k_proj, v_proj less k_proj: 16 * (4096 + 4096) * 2 * 32 = 8,388,608 (q and v)."""
    spec = RunSpec(method="lora", rank=16, targets=("q_proj", "k_proj", "v_proj"), exclude_modules=("k_proj",))
    assert lora_trainable_params(lookup("llama-2-7b").shape, spec) == 8_388_608


@pytest.mark.parametrize("name,targets,exclude", CASES, ids=[f"{c[0]}-{'+'.join(c[2])}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    config = two_layers(name)
    tm = "all-linear" if targets == ("all-linear",) else list(targets)
    expected = peft_trainable(config, r=8, target_modules=tm, exclude_modules=list(exclude))
    spec = RunSpec(method="lora", rank=8, targets=targets, exclude_modules=exclude)
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == expected
    assert expected < lora_trainable_params(ModelShape.from_hf_config(config), spec.with_(exclude_modules=()))


def test_refused() -> None:
    shape = ModelShape.from_hf_config(two_layers("llama-3.2-1b"))
    spec = RunSpec(method="lora", targets=("all-linear",))
    with pytest.raises(MemfitError, match="some\\s+layers only"):
        lora_trainable_params(shape, spec.with_(exclude_modules=("model.layers.0.mlp.down_proj",)))
    with pytest.raises(MemfitError, match="matches no module"):
        lora_trainable_params(shape, spec.with_(exclude_modules=("c_attn",)))
    with pytest.raises(MemfitError, match="every LoRA target"):
        lora_trainable_params(shape, RunSpec(method="lora", exclude_modules=("q_proj", "v_proj")))
    with pytest.raises(MemfitError, match="--exclude-modules"):
        RunSpec(method="full", exclude_modules=("k_proj",))


def test_read_from_adapter_config(tmp_path: Path) -> None:
    from memfit.configs import import_configs, to_spec

    data = json.loads((Path(__file__).parents[1] / "configs" / "files" / "adapter_config.json").read_text())
    data["exclude_modules"] = ["k_proj"]
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.exclude_modules == ("k_proj",)
    data["exclude_modules"] = ".*k_proj"  # a str is a regular expression in PEFT: not evaluated
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.exclude_modules == ()
    assert next(r for r in si.rows if r.field == "exclude_modules").status == "NOT MODELLED"


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.2-1b (16 layers) all-linear r 16 less k_proj (2048 -> 512): 16 * (2048 + 512) * 16 = 655,360 fewer
    trainable parameters; with --method full the flag is refused (exit 1)."""
    from memfit.cli import main

    assert main(["estimate", "llama-3.2-1b", "--targets", "all-linear", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)["trainable_params"]
    assert main(["estimate", "llama-3.2-1b", "--targets", "all-linear", "--exclude-modules", "k_proj", "--json"]) == 0
    assert full - json.loads(capsys.readouterr().out)["trainable_params"] == 655_360
    assert main(["estimate", "llama-3.2-1b", "--method", "full", "--exclude-modules", "k_proj"]) == 1
    assert "--exclude-modules" in capsys.readouterr().err
