"""``--layers-to-transform`` with the fused experts or the router adapted (issue 14 part 3; refused before).

PEFT 0.21.2 turns Mixtral's ``w1``, ``w3``, ``w2`` and ``gate`` (Qwen2/3-MoE's and DeepSeek's ``gate_proj``,
``up_proj``, ``down_proj`` and ``gate``) in a list ``target_modules`` into ``target_parameters``
(``_convert_peft_config_moe``), which ``BaseTuner._inject_parameters`` matches by parameter name only: it never reads
``layers_to_transform``. So the attention projections carry adapters on the listed layers only, the fused experts and
the router in every layer. (``all-linear`` with ``layers_to_transform`` is PEFT's own error: a str target_modules.)
Counts against PEFT itself on the meta device."""

from __future__ import annotations

from typing import Any

import pytest
from peft_on_meta import peft_trainable

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, estimate_memory, lookup, lora_trainable_params, model_states


def _layers(name: str, n: int) -> dict[str, Any]:
    entry = lookup(name)
    return {**entry.config, entry.shape.arch.keys.layers[0]: n}


CASES = [
    ("mixtral-8x7b", ("q_proj", "v_proj", "w1", "w3", "w2"), (1,)),
    ("mixtral-8x7b", ("q_proj", "gate"), (0, 2)),
    ("mixtral-8x7b", ("q_proj", "w1", "w3", "w2", "gate"), (2,)),
    ("qwen3-30b-a3b", ("q_proj", "k_proj", "gate_proj", "up_proj", "down_proj"), (1,)),
    ("moonlight-16b-a3b", ("o_proj", "gate_proj", "up_proj", "down_proj", "gate"), (1,)),  # layer 0 a dense MLP
    ("moonlight-16b-a3b", ("o_proj", "gate_proj", "up_proj", "down_proj"), (0,)),
]


@pytest.mark.parametrize("name,targets,layers", CASES, ids=[f"{c[0]}-{','.join(c[1])}-{c[2]}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], layers: tuple[int, ...]) -> None:
    config = _layers(name, 3)
    expected = peft_trainable(config, r=8, target_modules=list(targets), layers_to_transform=list(layers))
    spec = RunSpec(method="lora", rank=8, targets=targets, layers_to_transform=layers)
    shape = ModelShape.from_hf_config(config)
    assert lora_trainable_params(shape, spec) == expected
    assert model_states(shape, spec).trainable_params == expected
    # the same targets without layers_to_transform: PEFT's count too
    assert lora_trainable_params(shape, spec.with_(layers_to_transform=())) == peft_trainable(
        config, r=8, target_modules=list(targets))


def test_mixtral_worked() -> None:
    """Mixtral-8x7B (32 layers, h 4096, k/v 1024, i 14336, 8 experts), r=8, q_proj + w1, w3, w2 on layer 1:
    q_proj 8 * (4096 + 4096) = 65,536 once; per layer gate_up 2*8*8 * (4096 + 2*14336) = 4,194,304 and down 8*8 *
    (14336 + 4096) = 1,179,648, in all 32 layers (PEFT ignores layers_to_transform for them): 65,536 + 32 *
    5,373,952 = 172,032,000."""
    from memfit.estimate.adapter import adapted_layers, layer_adapters

    shape = lookup("mixtral-8x7b").shape
    spec = RunSpec(method="lora", rank=8, targets=("q_proj", "w1", "w3", "w2"), layers_to_transform=(1,))
    assert lora_trainable_params(shape, spec) == 172_032_000
    assert adapted_layers(shape, spec) == (True,) * 32
    sets = layer_adapters(shape, spec)
    assert sets[1] == {"self_attn.q_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
    assert sets[0] == sets[5] == {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
    estimate_memory(shape, spec)  # runs (refused before)


def test_half_a_fused_pair_is_peft_error() -> None:
    with pytest.raises(MemfitError, match="w1.*without also targeting w3"):
        lora_trainable_params(lookup("mixtral-8x7b").shape, RunSpec(method="lora", targets=("q_proj", "w1", "w2")))
