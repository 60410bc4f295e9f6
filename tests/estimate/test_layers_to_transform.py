"""``--layers-to-transform`` / ``--layers-pattern`` (PEFT 0.21.2 ``layers_to_transform`` / ``layers_pattern``:
adapters only on the listed decoder layers, the index read from each module's full name as
``check_target_module_exists`` reads it). Trainable counts equal PEFT's own on the meta device; the activations
of the frozen layers differ from the adapted ones (agreement rows: tests/validate/test_peft_rows.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_targets, peft_trainable

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, estimate_activations, estimate_memory, lookup, lora_trainable_params
from memfit.estimate.spec import parse_layers

FILES = Path(__file__).parents[1] / "configs" / "files"


def _four(name: str) -> dict[str, object]:
    entry = lookup(name)
    return {**entry.config, entry.shape.arch.keys.layers[0]: 4}


def test_llama2_7b_worked() -> None:
    """r 16 on q_proj, v_proj: 16 * (4096 + 4096) * 2 = 262,144 per layer; layers 0, 1 and 5: 786,432."""
    spec = RunSpec(method="lora", rank=16, targets=("q_proj", "v_proj"), layers_to_transform=(0, 1, 5))
    assert lora_trainable_params(lookup("llama-2-7b").shape, spec) == 786_432


CASES = [
    ("llama-3.2-1b", ("q_proj", "v_proj"), [2], None),
    ("llama-3.2-1b", ("q_proj", "down_proj"), [0, 3], "layers"),
    ("qwen2.5-0.5b", (), [1], None),
    ("gpt2", ("c_attn", "c_fc"), [1, 2], "h"),
    ("pythia-1.4b", (), [3], None),
]


@pytest.mark.parametrize("name,targets,layers,pattern", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], layers: list[int],
                                     pattern: str | None) -> None:
    config = _four(name)
    expected = peft_trainable(config, r=8, target_modules=peft_targets(targets) or
                              list(lookup(name).shape.arch.default_lora_targets()),
                              layers_to_transform=layers, layers_pattern=pattern)
    spec = RunSpec(method="lora", rank=8, targets=targets, layers_to_transform=tuple(layers),
                   layers_pattern=(pattern,) if pattern else ())
    shape = ModelShape.from_hf_config(config)
    assert lora_trainable_params(shape, spec) == expected
    assert lora_trainable_params(shape, spec.with_(layers_to_transform=(), layers_pattern=())) == expected * 4 // len(
        layers)


def test_frozen_layers_before_the_first_adapted_save_nothing() -> None:
    """Before the first adapted layer nothing requires grad (frozen embedding, frozen blocks): those layers save no
    tensor, so adapting only the last layer of Llama-2-7B saves what layer 0 saves when every layer is adapted (its
    input does not require grad either). Adapting every layer saves 32 blocks' worth."""
    shape, spec = lookup("llama-2-7b").shape, RunSpec(method="lora", targets=("q_proj", "v_proj"), seq=512)
    every = estimate_activations(shape, spec)
    last = estimate_activations(shape, spec.with_(layers_to_transform=(31,)))
    assert last.layers == every.first_layer > 0
    assert every.layers == every.first_layer + 31 * every.per_layer
    # and the peak falls with them (the blocks' saved tensors are most of this run's activations)
    assert estimate_memory(shape, spec.with_(layers_to_transform=(31,))).peak_bytes < estimate_memory(
        shape, spec).peak_bytes - 30 * every.per_layer


def test_parse_layers() -> None:
    assert parse_layers("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_layers([5, 1, 1]) == (1, 5)
    assert parse_layers(7) == (7,)
    for bad in ("a", "3-1", "-1", "1,,2"):
        with pytest.raises(MemfitError, match="--layers-to-transform"):
            parse_layers(bad)


def test_refused() -> None:
    shape = lookup("llama-3.2-1b").shape  # 16 layers
    with pytest.raises(MemfitError, match="target_modules is a str"):
        RunSpec(method="lora", targets=("all-linear",), layers_to_transform=(1,))
    with pytest.raises(MemfitError, match="target_modules is a str"):
        RunSpec(method="lora", targets_regex=r".*q_proj", layers_to_transform=(1,))
    with pytest.raises(MemfitError, match="must also be specified"):
        RunSpec(method="lora", layers_pattern=("layers",))
    with pytest.raises(MemfitError, match="--method full"):
        RunSpec(method="full", layers_to_transform=(1,))
    with pytest.raises(MemfitError, match="16 decoder layers, indexed 0..15"):
        lora_trainable_params(shape, RunSpec(method="lora", layers_to_transform=(3, 16)))
    with pytest.raises(MemfitError, match="leaves no module with an adapter"):
        lora_trainable_params(shape, RunSpec(method="lora", layers_to_transform=(3,), layers_pattern=("h",)))


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.2-1b (16 layers, PEFT's default q_proj, v_proj, h 2048, kv 512) r 16: 16 * (2048 + 2048) +
    16 * (2048 + 512) = 106,496 per layer; layers 0..3 and 9: 5 * 106,496 = 532,480."""
    from memfit.cli import main

    assert main(["estimate", "llama-3.2-1b", "--layers-to-transform", "0-3,9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainable_params"] == 532_480
    assert main(["estimate", "llama-3.2-1b", "--layers-to-transform", "16"]) == 1
    assert "indexed 0..15" in capsys.readouterr().err


def test_config_import(tmp_path: Path) -> None:
    """PEFT's adapter_config.json ``layers_to_transform`` / ``layers_pattern`` and axolotl's
    ``peft_layers_to_transform`` / ``peft_layers_pattern`` (passed to LoraConfig as they are) become the settings."""
    from memfit.configs import import_configs, to_spec

    data = json.loads((FILES / "adapter_config.json").read_text())
    data.update(layers_to_transform=[3, 0], layers_pattern="layers")
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.layers_to_transform == (0, 3) and si.spec.layers_pattern == ("layers",)
    data.update(layers_to_transform=2, layers_pattern=None)  # PEFT takes one int too
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    assert to_spec(import_configs([str(tmp_path / "adapter_config.json")])).spec.layers_to_transform == (2,)
    yml = tmp_path / "axolotl.yml"
    yml.write_text((FILES / "minimal_axolotl.yml").read_text() + "adapter: lora\nlora_target_modules: [q_proj]\n"
                   "sequence_len: 512\npeft_layers_to_transform: [1, 2]\npeft_layers_pattern: [layers]\n")
    si = to_spec(import_configs([str(yml)]), model_dtype="bfloat16")
    assert si.spec.layers_to_transform == (1, 2) and si.spec.layers_pattern == ("layers",)
    row = next(r for r in si.rows if r.field == "peft_layers_to_transform")
    assert row.status == "setting", row
