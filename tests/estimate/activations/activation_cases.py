"""Small models and runs for the hand-worked activation tests (imported by the test modules beside it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memfit.estimate import ModelShape, RunSpec
from memfit.estimate.activations.ops import Replay
from memfit.estimate.activations.tape import Saved, SymTensor

# b=1, s=8, h=16, a=2 heads, k=1 kv head, d=8, i=32, V=64, 2 layers
LLAMA: dict[str, Any] = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
                         "num_key_value_heads": 1, "intermediate_size": 32, "vocab_size": 64,
                         "max_position_embeddings": 64}
GPT2: dict[str, Any] = {"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2, "vocab_size": 64,
                        "n_positions": 64, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
GEMMA: dict[str, Any] = {**LLAMA, "model_type": "gemma", "head_dim": 8}


def model(base: dict[str, Any] = LLAMA, **overrides: Any) -> ModelShape:
    return ModelShape.from_hf_config({**base, **overrides})


def with_layout(shape: ModelShape, **flags: Any) -> ModelShape:
    """``shape`` with an architecture of its own whose layout has ``flags`` changed (a toy entry)."""
    arch = replace(shape.arch, layout=replace(shape.arch.layout, **flags))
    return replace(shape, arch=arch)


def replay(shape: ModelShape, **spec: Any) -> Replay:
    """A replay of ``shape`` at b=1, s=8 (bf16, CUDA, sdpa, LoRA rank 4 on PEFT's default targets unless given)."""
    return Replay.start(shape, RunSpec(**{"batch": 1, "seq": 8, "rank": 4, **spec}))


def hidden(rp: Replay, *, requires_grad: bool = True, width: int | None = None) -> SymTensor:
    """A (1, 8, width or h) activation in the run's residual dtype."""
    return rp.tape.new((1, 8, width or rp.model.hidden), rp.float_itemsize, requires_grad)


def by_component(saved: dict[int, Saved]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in saved.values():
        out[s.component] = out.get(s.component, 0) + s.nbytes
    return out
