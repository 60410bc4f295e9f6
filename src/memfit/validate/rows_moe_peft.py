"""Agreement rows with PEFT's per-layer options on mixture-of-experts models (issue 14 part 3): ``--bias`` and
``--layers-to-transform`` where the fused experts or the router carry adapters.

``--bias`` (PEFT 0.21.2 ``_mark_only_adapters_as_trainable``): ``all`` trains parameters named ``*.bias``: GPT-OSS's
attention biases and its router's ``mlp.router.bias``, never its experts' ``gate_up_proj_bias`` / ``down_proj_bias``
(transformers 5.24.0 names); ``lora_only`` the adapted ``nn.Linear`` layers' biases. Qwen3-MoE has no bias: ``all``
trains nothing more there.

``--layers-to-transform`` with the experts or the router named in ``--targets`` (PEFT turns Mixtral's w1/w3/w2/gate
and the Qwen2-MoE pattern's gate_proj/up_proj/down_proj/gate into ``target_parameters``): PEFT reads
``layers_to_transform`` only for ``target_modules``, so the attention projections carry adapters on the listed
layers and the fused experts and router in every layer.

Scaled configs (:func:`memfit.validate.agreement.scaled_config`, hidden 256) with ``vocab_size`` 1024 so that the
logits do not hide the blocks; bf16 so that transformers runs the experts through ``torch._grouped_mm``, which the
fake-tensor trace runs too (the eager per-expert loop's ``nonzero`` it cannot).
:func:`memfit.validate.agreement.peft_layer_matrix` makes them matrix rows (``full_matrix`` includes them).
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.catalogue import lookup
from memfit.estimate.spec import RunSpec


def _layers(model: str, n: int, **fields: Any) -> dict[str, Any]:
    """``n`` decoder layers (the architecture's own config key; GPT-OSS's ``layer_types`` cut to them), and
    ``fields``."""
    cfg = lookup(model).config
    out: dict[str, Any] = {lookup(model).shape.arch.keys.layers[0]: n, **fields}
    if isinstance(cfg.get("layer_types"), list):
        out["layer_types"] = (["sliding_attention", "full_attention"] * n)[:n]
    return out


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(device="cpu", method="lora", **kw)


_V = {"vocab_size": 1024}
_V_IDS = {**_V, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # GPT-OSS's ids lie past 1024
_QV = ("q_proj", "v_proj")

MOE_BIAS_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("gpt-oss-20b", _layers("gpt-oss-20b", 2, **_V_IDS), _spec(precision="bf16", attention="eager", batch=2, seq=64,
                                                          targets=_QV, bias="all")),
    ("gpt-oss-20b", _layers("gpt-oss-20b", 2, **_V_IDS), _spec(precision="bf16", attention="eager", batch=2, seq=64,
                                                          targets=("all-linear",), bias="lora_only")),
    ("gpt-oss-20b", _layers("gpt-oss-20b", 4, **_V_IDS), _spec(precision="bf16", attention="eager", batch=1, seq=64,
                                                          targets=_QV, bias="all", layers_to_transform=(2,))),
    # no attention bias: in layers 0 and 1 (no adapter) only the router's bias trains, so its logits and routing
    # weights require grad there and the experts' outputs are kept for the weights' gradient
    ("gpt-oss-20b", _layers("gpt-oss-20b", 4, attention_bias=False, **_V_IDS), _spec(
        precision="bf16", attention="eager", batch=2, seq=64, targets=_QV, bias="all", layers_to_transform=(2,))),
    # no bias anywhere: ``all`` trains nothing more (q_proj, v_proj: all-linear's bf16 experts are +2.4% here with
    # or without --bias, a gap of the adapted grouped_mm experts' backward on 128 small experts, not of --bias)
    ("qwen3-30b-a3b", _layers("qwen3-30b-a3b", 2, **_V), _spec(precision="bf16", attention="sdpa", batch=2, seq=64,
                                                              targets=_QV, bias="all")),
)

MOE_LAYER_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    # layers 0 and 1 frozen before the adapted one save nothing: not the sinks' softmax nor the routing weights'
    # product (the estimate had both requiring grad: +4.35%)
    ("gpt-oss-20b", _layers("gpt-oss-20b", 4, attention_bias=False, **_V_IDS), _spec(
        precision="bf16", attention="eager", batch=1, seq=64, targets=_QV, layers_to_transform=(2,))),
    # q_proj, v_proj on layer 2; the experts (w1, w3 -> gate_up_proj, w2 -> down_proj) in all four
    ("mixtral-8x7b", _layers("mixtral-8x7b", 4, **_V), _spec(precision="bf16", attention="sdpa", batch=2, seq=64,
                                                            targets=("q_proj", "v_proj", "w1", "w3", "w2"),
                                                            layers_to_transform=(2,))),
    # the router alone in layers 0 and 1 (its logits require grad from layer 0 on), q_proj beside it in layer 2
    ("mixtral-8x7b", _layers("mixtral-8x7b", 4, **_V), _spec(precision="bf16", attention="sdpa", batch=2, seq=64,
                                                            targets=("q_proj", "gate"), layers_to_transform=(2,))),
    ("qwen3-30b-a3b", _layers("qwen3-30b-a3b", 4, **_V), _spec(
        precision="bf16", attention="sdpa", batch=1, seq=64,
        targets=("q_proj", "k_proj", "gate_proj", "up_proj", "down_proj", "gate"), layers_to_transform=(1, 3))),
)

MOE_PEFT_ROWS = MOE_BIAS_ROWS + MOE_LAYER_ROWS

# the fast subset for `make test`: GPT-OSS's attention and router biases trained, its expert biases frozen; and its
# frozen layers before the adapted one
FAST_MOE_PEFT_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (MOE_BIAS_ROWS[0], MOE_LAYER_ROWS[0])
