"""The parts of a decoder block whose sizes memory depends on: :class:`Linear` (a linear layer, with its role
whatever the architecture calls it), :class:`Norm` and :class:`BlockParam`, as
:meth:`memfit.estimate.shape.ModelShape.linears` lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BlockParam", "Latent", "Linear", "LinearRole", "Norm", "NormRole"]

LinearRole = Literal["q", "k", "v", "qkv", "o", "gate", "up", "gate_up", "down", "router", "experts_gate_up",
                     "experts_down", "q_a", "q_b", "kv_a", "kv_b", "shared_gate", "shared_up", "shared_down"]
NormRole = Literal["pre_attn", "q", "k", "post_attn", "pre_mlp", "post_mlp", "q_a", "kv_a"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Latent:
    """Multi-head latent attention's sizes (DeepSeek-V2/V3, ``BlockLayout.latent_attention``): q through a rank
    ``q_rank`` bottleneck with its RMSNorm (0: one q projection), k and v from a ``kv_rank`` latent (normed) and
    one shared rope part; per head q and k are ``nope + rope`` wide, v ``v`` wide."""

    q_rank: int
    kv_rank: int
    nope: int
    rope: int
    v: int

    @property
    def qk(self) -> int:
        """The per-head width of q and k: nope + rope."""
        return self.nope + self.rope


@dataclass(frozen=True, kw_only=True, slots=True)
class Linear:
    """One linear layer inside a decoder block, named by its path in the HF module tree.

    ``path`` is relative to the block (``"self_attn.q_proj"``); PEFT matches a target name
    against the last component (``"q_proj"``). ``role`` is what it computes, whatever the architecture calls
    it. ``experts`` > 1 means one weight per expert stored as a fused 3-D parameter (transformers 5 MoE),
    which PEFT's ``all-linear`` reaches through ``ParamWrapper``.
    """

    path: str
    role: LinearRole
    in_features: int
    out_features: int
    bias: bool = False
    experts: int = 1
    is_nn_linear: bool = True

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def weight_numel(self) -> int:
        return self.in_features * self.out_features * self.experts

    @property
    def numel(self) -> int:
        return self.weight_numel + (self.out_features * self.experts if self.bias else 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Norm:
    """A normalisation layer with a weight of ``size`` (and a bias for LayerNorm with bias)."""

    path: str
    role: NormRole
    size: int
    bias: bool

    @property
    def numel(self) -> int:
        return self.size * (2 if self.bias else 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockParam:
    """A parameter of a block that is neither a linear's nor a norm's (GPT-OSS's attention sinks, (a,))."""

    path: str
    size: int

    @property
    def numel(self) -> int:
        return self.size
