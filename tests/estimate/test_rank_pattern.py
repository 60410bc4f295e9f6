"""``--rank-pattern`` (PEFT 0.21.2 ``LoraConfig.rank_pattern``: the first key with ``re.match(rf"(.*\\.)?({key})$",
name)`` gives the module's r): trainable counts equal PEFT's own on the meta device; a pattern that gives one module
different ranks in different layers is refused by the estimate (it replays one block for all)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_targets, peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params

CASES = [
    ("llama-3.2-1b", ("all-linear",), {"q_proj": 32, "mlp.down_proj": 4}),
    ("llama-3.2-1b", (), {"v_proj": 2}),
    ("qwen2.5-0.5b", ("all-linear",), {".*proj": 12}),  # a regular expression: every linear
    ("gpt2", ("all-linear",), {"c_fc": 24}),
]



def test_llama2_7b_worked() -> None:
    """r 16 on q_proj, v_proj with q_proj at 64: 64 * 8192 * 32 + 16 * 8192 * 32 = 16,777,216 + 4,194,304."""
    spec = RunSpec(method="lora", rank=16, targets=("q_proj", "v_proj"), rank_pattern=(("q_proj", 64),))
    assert lora_trainable_params(lookup("llama-2-7b").shape, spec) == 20_971_520


@pytest.mark.parametrize("name,targets,pattern", CASES, ids=[f"{c[0]}-{'+'.join(c[2])}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], pattern: dict[str, int]) -> None:
    config = two_layers(name)
    expected = peft_trainable(config, r=8, target_modules=peft_targets(targets), rank_pattern=dict(pattern))
    spec = RunSpec(method="lora", rank=8, targets=targets, rank_pattern=tuple(pattern.items()))
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == expected
    assert expected != lora_trainable_params(ModelShape.from_hf_config(config), spec.with_(rank_pattern=()))


def test_refused() -> None:
    shape = ModelShape.from_hf_config(two_layers("llama-3.2-1b"))
    with pytest.raises(MemfitError, match="different layers"):
        lora_trainable_params(shape, RunSpec(method="lora", rank_pattern=(("layers.0.self_attn.q_proj", 4),)))
    with pytest.raises(MemfitError, match="NAME=RANK"):
        RunSpec.from_dict({"rank_pattern": "q_proj:4"})
    with pytest.raises(MemfitError, match="--rank-pattern"):
        RunSpec(method="full", rank_pattern=(("q_proj", 4),))


def test_cli_and_adapter_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.2-1b (16 layers, default q_proj, v_proj) r 16, q_proj at 32: + 16 * (2048 + 2048) * 16 = 1,048,576."""
    from memfit.cli import main
    from memfit.configs import import_configs, to_spec

    assert main(["estimate", "llama-3.2-1b", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)["trainable_params"]
    assert main(["estimate", "llama-3.2-1b", "--rank-pattern", "q_proj=32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainable_params"] - base == 1_048_576
    data = json.loads((Path(__file__).parents[1] / "configs" / "files" / "adapter_config.json").read_text())
    data["rank_pattern"] = {"q_proj": 32, "down_proj": 4}
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.rank_pattern == (("q_proj", 32), ("down_proj", 4))
