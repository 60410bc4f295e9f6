"""Exact parameter counts from a ModelShape, in pure Python.

Per decoder block (Llama-style, no biases)::

    attention  = h*(a*d) + 2*h*(k*d) + (a*d)*h        q, k, v, o
    mlp        = 3*h*i                                gate, up, down
    norms      = 2*h                                  input + post-attention RMSNorm
    total      = V*h (embed) + L*block + h (final norm) + V*h (lm_head, unless tied)

Worked for Llama-2-7B (L=32, h=4096, a=k=32, d=128, i=11008, V=32000, untied)::

    block = 4*4096*4096 + 3*4096*11008 + 2*4096 = 202,383,360
    total = 2*32000*4096 + 32*202,383,360 + 4096 = 6,738,415,616
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memfit.estimate.shape import ModelShape


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCount:
    """Parameter counts (numbers of elements, not bytes) of one model."""

    total: int
    embeddings: int  # token (+ learned position) embeddings
    lm_head: int  # 0 when tied to the token embedding (its bias, where it has one, is not tied)
    per_layer: int  # one decoder block (the last one's kind where layers differ: DeepSeek's dense-first layers)
    layers: int  # all decoder blocks
    final_norm: int
    other: int  # e.g. OPT's project_in / project_out
    by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def trainable_default(self) -> int:
        """What a full fine-tune trains: every parameter (tied weights counted once)."""
        return self.total

    def breakdown(self) -> dict[str, int]:
        """Hierarchical keys, nanoGPT style: ``params/layers/q_proj`` ... up to ``params/total``."""
        out = {f"params/{'layers/' if k not in _TOP_LEVEL else ''}{k}": v for k, v in self.by_kind.items()}
        out["params/total"] = self.total
        return out


_TOP_LEVEL = ("embed_tokens", "embed_positions", "final_norm", "lm_head", "project_in", "project_out")


def layer_kind_names(shape: ModelShape) -> dict[str, str]:
    """Map each block module path to its display kind: the last name, or the path where names repeat."""
    paths = list(dict.fromkeys(p for sub, _ in shape.layer_groups() for p in _block_paths(sub)))
    last = Counter(p.rsplit(".", 1)[-1] for p in paths)
    return {p: (p.rsplit(".", 1)[-1] if last[p.rsplit(".", 1)[-1]] == 1 else p) for p in paths}


def _block_paths(shape: ModelShape) -> list[str]:
    return [lin.path for lin in shape.linears()] + [n.path for n in shape.norms()]


def _block_numels(shape: ModelShape, kinds: dict[str, str]) -> list[tuple[str, int]]:
    """(display kind, elements) of every parameter module of one block of ``shape``'s (uniform) kind."""
    out = [(kinds[lin.path], lin.numel) for lin in shape.linears()]
    out += [(kinds[norm.path], norm.numel) for norm in shape.norms()]
    return out + [(p.path.rsplit(".", 1)[-1], p.numel) for p in shape.block_params()]  # GPT-OSS's attention sinks


def count_params(shape: ModelShape) -> ParamCount:
    """Count every parameter of the model transformers builds from this shape's config: each block kind
    (:meth:`ModelShape.layer_groups`) times its layers."""
    kinds = layer_kind_names(shape)
    by_kind: dict[str, int] = {}
    layers = 0
    for sub, n in shape.layer_groups():
        for kind, numel in _block_numels(sub, kinds):
            by_kind[kind] = by_kind.get(kind, 0) + numel * n
            layers += numel * n
    per_layer = sum(numel for _, numel in _block_numels(shape.layer_shape(shape.n_layers - 1), kinds))

    embed = shape.vocab * shape.embed_dim
    by_kind["embed_tokens"] = embed
    positions = 0
    if shape.layout.position == "learned":
        # plus the architecture's offset rows (OPT's position ids start at 2: max_positions + 2 rows)
        rows = shape.max_positions + shape.layout.position_offset
        positions = rows * shape.hidden
        by_kind["embed_positions"] = positions
    other = 0
    if shape.embed_proj_dim:
        other = 2 * shape.embed_proj_dim * shape.hidden  # project_in and project_out, no bias
        by_kind["project_in"] = by_kind["project_out"] = shape.embed_proj_dim * shape.hidden
    final_norm = 0
    if shape.final_norm:
        final_norm = shape.hidden * (2 if shape.layout.norm_bias else 1)
        by_kind["final_norm"] = final_norm
    lm_head = (0 if shape.tie_embeddings else shape.vocab * shape.embed_dim) + (
        shape.vocab if shape.layout.head_bias else 0)  # Phi's lm_head bias stays untied
    if lm_head:
        by_kind["lm_head"] = lm_head
    total = embed + positions + layers + final_norm + other + lm_head
    return ParamCount(
        total=total,
        embeddings=embed + positions,
        lm_head=lm_head,
        per_layer=per_layer,
        layers=layers,
        final_norm=final_norm,
        other=other,
        by_kind=by_kind,
    )
