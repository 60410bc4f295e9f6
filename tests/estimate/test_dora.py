"""DoRA (``--dora``, PEFT 0.21.2 ``use_dora``): trainable counts equal PEFT's own on the meta device, the
estimate's saved tensors and weight-norm transient worked by hand, and what PEFT refuses refused.
(The agreement with real CPU steps: tests/validate/test_dora_rows.py.)"""

from __future__ import annotations

import pytest
from peft_on_meta import peft_targets, peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, estimate_memory, lookup, lora_trainable_params
from memfit.estimate.activations import estimate_activations
from memfit.validate.agreement import scaled_config

CASES = [
    ("llama-3.2-1b", ()),
    ("llama-3.2-1b", ("all-linear",)),
    ("qwen2.5-0.5b", ("all-linear",)),
    ("gpt2", ("all-linear",)),  # Conv1D: fan_in_fan_out, the magnitude still has out elements
    ("phi-3-mini", ("qkv_proj", "o_proj")),
    ("mixtral-8x7b", ("q_proj", "v_proj")),
]


def test_llama2_7b_trainable_params_worked() -> None:
    """r=16 on q_proj, v_proj: LoRA 16 * (4096 + 4096) * 2 * 32 = 8,388,608; DoRA adds one magnitude of out = 4096
    per adapted linear: 4096 * 2 * 32 = 262,144, so 8,650,752."""
    shape = lookup("llama-2-7b").shape
    spec = RunSpec(method="lora", rank=16, targets=("q_proj", "v_proj"))
    assert lora_trainable_params(shape, spec) == 8_388_608
    assert lora_trainable_params(shape, spec.with_(use_dora=True)) == 8_650_752


@pytest.mark.parametrize("name,targets", CASES, ids=[f"{n}-{'+'.join(t) or 'default'}" for n, t in CASES])
def test_dora_trainable_params_equal_peft(name: str, targets: tuple[str, ...]) -> None:
    config = two_layers(name)
    expected = peft_trainable(config, r=8, target_modules=peft_targets(targets), use_dora=True)
    spec = RunSpec(method="lora", rank=8, targets=targets, use_dora=True)
    assert lora_trainable_params(ModelShape.from_hf_config(config), spec) == expected


def test_magnitudes_are_trained_fp32_states() -> None:
    """Scaled Llama (h 256, q out 256, v out 64, 2 layers): magnitudes (256 + 64) * 2 = 640 fp32 parameters =
    2,560 B of weights, as many of gradients, and AdamW's two moments 5,120 B plus a 4-byte step per tensor (4)."""
    shape = ModelShape.from_hf_config(scaled_config("llama-3.2-1b", 256, 2))
    spec = RunSpec(method="lora", precision="fp32", device="cpu", batch=1, seq=64)
    lora = estimate_memory(shape, spec).model_states
    dora = estimate_memory(shape, spec.with_(use_dora=True)).model_states
    assert dora.weights_trainable - lora.weights_trainable == 2_560
    assert dora.gradients - lora.gradients == 2_560
    assert dora.optimizer - lora.optimizer == 5_120 + 4 * 4


def test_saved_outputs_worked() -> None:
    """Scaled Llama, default targets (q out 256, v out 64), fp32, b1 s64 (T = 64): each adapted linear saves its base
    output and lora_B's output (T * out * 4 B each) and the (out,) weight norm and (1, out) scale (out * 4 each);
    block 1 also the (1, out) ``scale - 1`` (its base output requires grad). Per block 64 * 320 * 8 = 163,840 +
    2 * 320 * 4 = 2,560 (+ 1,280 in block 1): 2 blocks 327,680 + 5,120 + 1,280 = 334,080 B more than LoRA (the
    live-storage tracker measured the same 334,080 on a real CPU step)."""
    shape = ModelShape.from_hf_config(scaled_config("llama-3.2-1b", 256, 2))
    spec = RunSpec(method="lora", precision="fp32", device="cpu", batch=1, seq=64)
    lora, dora = estimate_activations(shape, spec), estimate_activations(shape, spec.with_(use_dora=True))
    assert dora.layers - lora.layers == 334_080


def test_weight_norm_transient_worked() -> None:
    """Scaled Llama all-linear fp32 b1 s16, r 16: the widest is down_proj (in 1024, out 256): eye(1024) 4,194,304 +
    lora_A's output on it 1024 * 16 * 4 = 65,536 + the product B@A 1024 * 256 * 4 = 1,048,576 + W + s*BA
    (two 1,048,576) = 7,405,568, with down_proj's fp32 input 16 * 1024 * 4 = 65,536 and its base output
    16 * 256 * 4 = 16,384 alive beside: 7,487,488. Plain LoRA has no such moment."""
    shape = ModelShape.from_hf_config({**scaled_config("llama-3.2-1b", 256, 2), "vocab_size": 1024})
    spec = RunSpec(method="lora", precision="fp32", device="cpu", batch=1, seq=16, targets=("all-linear",))
    assert estimate_activations(shape, spec).forward_temps == 0
    assert estimate_activations(shape, spec.with_(use_dora=True)).forward_temps == 7_487_488
    est = estimate_memory(shape, spec.with_(use_dora=True))
    assert est.peak_phase == "forward"


def test_refused_where_peft_refuses() -> None:
    with pytest.raises(MemfitError, match="--dora"):
        RunSpec(method="full", use_dora=True)
    shape = ModelShape.from_hf_config(scaled_config("mixtral-8x7b", 256, 2))
    with pytest.raises(MemfitError, match="DoRA"):  # peft 0.21.2 ParamWrapper: "does not work with use_dora=True"
        estimate_memory(shape, RunSpec(method="lora", targets=("all-linear",), use_dora=True))


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--dora`` on llama-3.2-1b (16 layers; default targets q_proj out 2048, v_proj out 512): the magnitudes add
    (2048 + 512) * 16 = 40,960 trainable parameters to LoRA's; ``--method full --dora`` exits 1 naming the fix."""
    import json

    from memfit.cli import main

    assert main(["estimate", "llama-3.2-1b", "--json"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert main(["estimate", "llama-3.2-1b", "--dora", "--json"]) == 0
    dora = json.loads(capsys.readouterr().out)
    assert dora["spec"]["use_dora"] is True
    assert dora["trainable_params"] - lora["trainable_params"] == 40_960
    assert main(["estimate", "llama-3.2-1b", "--method", "full", "--dora"]) == 1
    assert "--dora" in capsys.readouterr().err
