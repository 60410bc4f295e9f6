"""Agreement rows with PEFT's per-layer options (issue 14 parts 3, 4 and 6): ``--layers-to-transform`` (PEFT 0.21.2
``layers_to_transform`` / ``layers_pattern``: adapters on some decoder layers only) and ``--bias`` (``bias="all"`` /
``"lora_only"``: trained biases, and under ``all`` LayerNorms whose output needs grad in layer 0) and
``--trainable-tokens`` (``trainable_token_indices``: delta rows of the embedding, its merged table's gradient; with
tied embeddings the lm_head's own merged table, saved by its matmul, and that table's dense gradient).

The scaled models get four layers here (``_FOUR``), so that a layer before the first adapted one (its input does
not require grad: it saves nothing), an adapted one and a frozen one after it (it saves what the input gradient
needs, not LoRA's fp32 input copies) all occur; ``vocab_size`` 1024 keeps the logits from hiding the blocks.
:func:`memfit.validate.agreement.peft_layer_matrix` makes them matrix rows (``full_matrix`` includes them).
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.catalogue import lookup
from memfit.estimate.spec import RunSpec


def _four(model: str, **fields: Any) -> dict[str, Any]:
    """Four decoder layers (the architecture's own config key), and ``fields``."""
    return {lookup(model).shape.arch.keys.layers[0]: 4, **fields}


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(device="cpu", method="lora", **kw)


_V = {"vocab_size": 1024}
_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # PEFT refuses all-linear here

LAYER_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("llama-3.2-1b", _four("llama-3.2-1b", **_V), _spec(precision="fp32", attention="sdpa", batch=2, seq=64,
                                                        targets=("q_proj", "v_proj"), layers_to_transform=(2,))),
    ("llama-3.2-1b", _four("llama-3.2-1b", **_V), _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=64,
                                                        targets=_ALL, layers_to_transform=(0, 2))),
    ("llama-3.2-1b", _four("llama-3.2-1b"), _spec(precision="fp32", attention="eager", batch=1, seq=64,
                                                  targets=_ALL, layers_to_transform=(1, 2, 3))),
    ("qwen2.5-0.5b", _four("qwen2.5-0.5b", **_V), _spec(precision="fp32", attention="sdpa", batch=2, seq=64,
                                                        layers_to_transform=(1, 3), checkpointing="full")),
    ("gpt2", _four("gpt2", **_V), _spec(precision="fp32", attention="eager", batch=2, seq=64,
                                        layers_to_transform=(3,), layers_pattern=("h",))),
)

BIAS_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("gpt2", {}, _spec(precision="fp32", attention="eager", batch=2, seq=64, bias="all")),
    ("gpt2", _V, _spec(precision="fp32", attention="sdpa", batch=2, seq=64, bias="lora_only")),
    ("pythia-1.4b", _V, _spec(precision="fp32", attention="sdpa", batch=2, seq=64, bias="all")),
    ("qwen2.5-0.5b", {}, _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=64, bias="all")),
    ("qwen2.5-0.5b", _four("qwen2.5-0.5b", **_V), _spec(precision="fp32", attention="sdpa", batch=2, seq=64,
                                                        bias="lora_only", layers_to_transform=(2,))),
)

# --trainable-tokens (PEFT trainable_token_indices) on untied tables: the dense (V, h) gradient of the merged table
# at the end of the backward; Llama-3.2 untied by its config
TOKEN_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("pythia-1.4b", {}, _spec(precision="fp32", attention="sdpa", batch=2, seq=64,
                              trainable_token_indices=(0, 1, 50000))),
    ("llama-3.2-1b", {"tie_word_embeddings": False}, _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=64,
                                                           trainable_token_indices=(128000, 128001))),
    ("pythia-1.4b", {}, _spec(precision="fp32", attention="sdpa", batch=1, seq=32, checkpointing="full",
                              trainable_token_indices=(7,))),
    # tied embeddings: PEFT's tied TrainableTokensLayer on the lm_head (estimate/adapter.py). GPT-2 and Llama-3.2 peak
    # at the lm_head's matmul backward (its merged table saved + the table's dense gradient), the mixed-bf16 rows at
    # the end of the lm_head's forward (the fp32 merged table beside its bf16 copy and the logits)
    ("gpt2", {}, _spec(precision="fp32", attention="eager", batch=2, seq=64, trainable_token_indices=(0, 1, 50000))),
    ("qwen2.5-0.5b", _four("qwen2.5-0.5b", **_V), _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=64,
                                                        trainable_token_indices=(5, 7))),
    ("llama-3.2-1b", {}, _spec(precision="fp32", attention="sdpa", batch=1, seq=32,
                               trainable_token_indices=(128000,))),
    ("llama-3.2-1b", {}, _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=32, checkpointing="full",
                               trainable_token_indices=(128000, 5))),
)

# the fast subset for `make test`: the frozen layers before the first adapted one, and a frozen one after
FAST_LAYER_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (LAYER_ROWS[0], LAYER_ROWS[1])
FAST_BIAS_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (BIAS_ROWS[2],)
FAST_TOKEN_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (TOKEN_ROWS[2], TOKEN_ROWS[4])
