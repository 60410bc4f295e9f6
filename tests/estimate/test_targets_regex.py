"""``--targets-regex`` (PEFT 0.21.2: a str ``target_modules`` is ``re.fullmatch``-ed against every full module
name): trainable counts equal PEFT's own on the meta device; what the estimate cannot model is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params

CASES = [
    ("llama-3.2-1b", r".*\.(q|v)_proj"),
    ("llama-3.2-1b", r".*mlp\..*_proj"),
    ("qwen2.5-0.5b", r"model\.layers\.\d+\.self_attn\.(k|o)_proj"),
    ("gpt2", r".*c_(attn|proj)"),  # attn.c_proj and mlp.c_proj
]



def test_llama2_7b_worked() -> None:
    """r 16 on ``.*\\.(q|v)_proj``: the same modules as q_proj, v_proj: 8,388,608."""
    spec = RunSpec(method="lora", rank=16, targets_regex=r".*\.(q|v)_proj")
    assert lora_trainable_params(lookup("llama-2-7b").shape, spec) == 8_388_608


@pytest.mark.parametrize("name,pattern", CASES, ids=[c[0] + "-" + c[1] for c in CASES])
def test_trainable_params_equal_peft(name: str, pattern: str) -> None:
    config = two_layers(name)
    expected = peft_trainable(config, r=8, target_modules=pattern)
    spec = RunSpec(method="lora", rank=8, targets_regex=pattern)
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == expected


def test_refused() -> None:
    shape = ModelShape.from_hf_config(two_layers("llama-3.2-1b"))
    with pytest.raises(MemfitError, match="some layers only"):
        lora_trainable_params(shape, RunSpec(method="lora", targets_regex=r"model\.layers\.0\..*_proj"))
    with pytest.raises(MemfitError, match="lm_head"):
        lora_trainable_params(shape, RunSpec(method="lora", targets_regex=r".*(q_proj|lm_head)"))
    with pytest.raises(MemfitError, match="matches no module"):
        lora_trainable_params(shape, RunSpec(method="lora", targets_regex=r".*c_attn"))
    with pytest.raises(MemfitError, match="pass one"):
        RunSpec(method="lora", targets=("q_proj",), targets_regex=r".*v_proj")


def test_read_from_adapter_config(tmp_path: Path) -> None:
    from memfit.configs import import_configs, to_spec

    data = json.loads((Path(__file__).parents[1] / "configs" / "files" / "adapter_config.json").read_text())
    data["target_modules"] = r".*\.(q|v)_proj"
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.targets_regex == r".*\.(q|v)_proj" and si.spec.targets == ()
