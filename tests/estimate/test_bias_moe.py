"""``--bias all`` / ``--bias lora_only`` on mixture-of-experts models (issue 14 part 3; refused before).

PEFT 0.21.2 ``BaseTuner._mark_only_adapters_as_trainable``: ``all`` trains every parameter whose name is ``bias`` or
ends with ``.bias``; ``lora_only`` the ``bias`` of each LoRA layer (``ParamWrapper``, PEFT's wrapper of fused experts
and routers, has none). transformers 5.24.0 names GPT-OSS's expert biases ``experts.gate_up_proj_bias`` and
``experts.down_proj_bias``: they never train; its router's ``mlp.router.bias`` does under ``all``. Mixtral, Qwen3-MoE
and DeepSeek-V3 have no bias in their MoE (DeepSeek's ``e_score_correction_bias`` is a buffer). Counts against PEFT
itself on the meta device."""

from __future__ import annotations

from typing import Any

import pytest
from peft_on_meta import peft_targets, peft_trainable, two_layers

from memfit.estimate import ModelShape, RunSpec, lookup, lora_trainable_params, model_states


def _config(name: str) -> dict[str, Any]:
    cfg = two_layers(name)
    if "layer_types" in cfg:  # GPT-OSS: one entry per layer
        cfg["layer_types"] = cfg["layer_types"][:2]
    return cfg


CASES = [
    ("gpt-oss-20b", ("q_proj", "v_proj"), "all"),
    ("gpt-oss-20b", ("q_proj", "v_proj"), "lora_only"),
    ("gpt-oss-20b", ("all-linear",), "all"),
    ("gpt-oss-20b", ("all-linear",), "lora_only"),
    ("mixtral-8x7b", ("all-linear",), "all"),
    ("mixtral-8x7b", ("all-linear",), "lora_only"),
    ("qwen3-30b-a3b", ("q_proj", "v_proj"), "all"),
    ("moonlight-16b-a3b", ("all-linear",), "all"),
]


@pytest.mark.parametrize("name,targets,bias", CASES, ids=[f"{c[0]}-{','.join(c[1])}-{c[2]}" for c in CASES])
def test_trainable_params_equal_peft(name: str, targets: tuple[str, ...], bias: str) -> None:
    config = _config(name)
    expected = peft_trainable(config, r=8, target_modules=peft_targets(targets), bias=bias)
    spec = RunSpec(method="lora", rank=8, targets=targets, bias=bias)  # type: ignore[arg-type]
    shape = ModelShape.from_hf_config(config)
    assert lora_trainable_params(shape, spec) == expected
    assert model_states(shape, spec).trainable_params == expected


def test_gpt_oss_worked() -> None:
    """gpt-oss-20b: 24 layers, h 2880, 64 query heads and 8 key/value heads of 64 (q 4096, k and v 512 biased, o
    2880 biased), 32 experts (router bias 32; expert biases (32, 5760) and (32, 2880), frozen under every --bias).
    q_proj, v_proj with ``lora_only``: (4096 + 512) * 24 = 110,592 biases; ``all``: (4096 + 512 + 512 + 2880 + 32) *
    24 = 192,768 (RMSNorm and lm_head have none). bf16: each moves 2 bytes from the frozen weights to the trained
    ones, adds a 2-byte gradient and two 2-byte AdamW moments (one tensor each: 2 per layer for lora_only, 5 for
    all, each padded to 512 B)."""
    shape = lookup("gpt-oss-20b").shape
    spec = RunSpec(method="lora", targets=("q_proj", "v_proj"))
    base = model_states(shape, spec)
    for bias, n, tensors in (("lora_only", 110_592, 2 * 24), ("all", 192_768, 5 * 24)):
        st = model_states(shape, spec.with_(bias=bias))
        assert st.trainable_params - base.trainable_params == n
        assert base.weights_frozen - st.weights_frozen == 2 * n
        assert st.weights_trainable - base.weights_trainable == 2 * n
        assert st.gradients - base.gradients == 2 * n
        assert st.optimizer - base.optimizer == 4 * n + 512 * tensors


def test_mixtral_all_trains_nothing_more() -> None:
    """Mixtral has no parameter named *.bias: ``--bias all`` is PEFT's ``none`` for it (refused before)."""
    shape = lookup("mixtral-8x7b").shape
    spec = RunSpec(method="lora", targets=("all-linear",))
    assert model_states(shape, spec.with_(bias="all")) == model_states(shape, spec)
