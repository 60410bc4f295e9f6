"""ModelShape: the numbers of a decoder-only transformer that memory depends on, with its architecture,
read from a Hugging Face ``config.json`` without importing torch.

The architecture (:data:`memfit.estimate.arch.REGISTRY`, keyed by ``model_type``) says where each number sits in
its config and what transformers 5.24 uses when it is absent (:class:`~memfit.estimate.arch.ConfigKeys`), and how
its block computes (:class:`~memfit.estimate.arch.BlockLayout`). The shape resolves the config's values:

=====================  ==========================================================================
fact                   where (first present key wins; the architecture's default when none is)
=====================  ==========================================================================
layers, hidden, heads  num_hidden_layers / n_layer, hidden_size / n_embd, num_attention_heads / n_head
kv heads, head_dim     num_key_value_heads (null: = heads), head_dim; multi-head architectures (GPT-2,
                       GPT-NeoX, OPT) ignore both: kv heads = heads, d = h / a
intermediate, vocab    intermediate_size (GPT-2 n_inner, default 4h; OPT ffn_dim), vocab_size
biases, norms, MLP     the architecture's keys (attention_bias, enable_bias ...) or fixed values
sliding window         sliding_window, per layer by the layout's rule or the config's ``layer_types``
experts                num_local_experts, num_experts_per_tok
dropout                attention / residual / embedding dropout, per architecture
=====================  ==========================================================================

The reader is the boundary every engine crosses (:func:`validate_config`; ``trace`` and ``measure`` build the
transformers config from the same dict only after it): sizes must be positive integers within ``SIZE_LIMITS``,
key/value heads must divide the heads, the heads must divide the hidden size where transformers requires it
(``ConfigKeys.heads_divide_hidden``), and a token may not pick more experts than there are.
:func:`~memfit.estimate.config_file.read_config_file` reads a ``config.json`` of at most ``MAX_CONFIG_BYTES``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.arch import REGISTRY, Architecture, BlockLayout, ConfigReader, LayerType, MissingKey
from memfit.estimate.arch.keys import NotModelled, check_int, first_key
from memfit.estimate.block_parts import BlockParam, Latent, Linear, Norm
from memfit.estimate.config_file import read_config_file
from memfit.estimate.config_read import (
    check_experts,
    check_kv_heads,
    read_experts,
    read_heads,
    read_layer_types,
    rope_theta,
)

_MAX_TEXT_CONFIG_DEPTH = 4  # multimodal configs nest the language model's config once (text_config)


def _dropout_fields() -> dict[str, dict[str, tuple[str, float]]]:
    return {t: a.keys.dropout_fields() for t, a in REGISTRY.items()}


# model_type -> ModelShape dropout field -> (config key, the config class's default): a view of the registry's
# ConfigKeys (``attention_dropout``, ``residual_dropout``, ``embedding_dropout``).
DROPOUT_FIELDS: dict[str, dict[str, tuple[str, float]]] = _dropout_fields()


# ModelShape fields that only some architectures have, and the value to_dict leaves them out at
_SHOWN_WHEN_SET = {"attn_residual_dropout": None, "multi_query": False, "router_renorm": True, "latent": None,
                   "shared_intermediate": 0, "dense_mlp": (), "dense_intermediate": 0}


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelShape:
    """What a training step's memory depends on, for one decoder-only model.

    Symbols used across memfit's docstrings: L = ``n_layers``, h = ``hidden``, a = ``n_heads``,
    k = ``n_kv_heads``, d = ``head_dim``, i = ``intermediate``, V = ``vocab``, E = ``n_experts``.
    ``arch`` holds what the architecture is; the fields below are this config's values, including the
    flags a config can change (biases, ``parallel_residual``, ``final_norm``, soft-capping, the window).
    ``layer_types`` is each layer's attention (``full`` or ``sliding``).
    """

    name: str
    arch: Architecture
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    norm_eps: float
    activation: str
    max_positions: int
    rotary_fraction: float = 1.0
    rope_theta: float | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    parallel_residual: bool = False
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[LayerType, ...] = ()
    n_experts: int = 0
    experts_per_token: int = 0
    embed_proj_dim: int = 0
    final_norm: bool = True
    attention_dropout: float = 0.0
    residual_dropout: float = 0.0
    embedding_dropout: float = 0.0
    qk_norm_enabled: bool = True
    attn_residual_dropout: float | None = None  # the attention output's own dropout (Falcon's serial block)
    multi_query: bool = False  # Falcon's multi_query: one key/value head, indexed out of the fused qkv
    router_renorm: bool = True  # MoE: the top-k weights divided by their sum (Qwen3-MoE's norm_topk_prob)
    latent: Latent | None = None  # multi-head latent attention's sizes (BlockLayout.latent_attention)
    shared_intermediate: int = 0  # the MoE block's shared experts' MLP width (MoeLayout.shared_experts)
    dense_mlp: tuple[bool, ...] = ()  # per layer: a dense MLP of dense_intermediate instead of the experts
    dense_intermediate: int = 0

    # ---- derived structure -------------------------------------------------------------
    @property
    def layout(self) -> BlockLayout:
        return self.arch.layout

    @property
    def model_type(self) -> str:
        return self.arch.model_type

    @property
    def has_qk_norm(self) -> bool:
        """q/k norms exist: the layout has them and this config keeps them (Phi's ``qk_layernorm``)."""
        return self.layout.qk_norm != "none" and self.qk_norm_enabled

    @property
    def q_dim(self) -> int:
        """a*d: width of the query projection."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """k*d: width of each of the key and value projections."""
        return self.n_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def has_pre_mlp_norm(self) -> bool:
        """Whether the block has a norm before its MLP (Falcon's only with a serial residual)."""
        lay = self.layout
        return lay.pre_mlp_norm and not (lay.pre_mlp_norm_serial_only and self.parallel_residual)

    @property
    def attn_output_dropout(self) -> float:
        """The dropout probability on the attention output before its residual add."""
        return self.residual_dropout if self.attn_residual_dropout is None else self.attn_residual_dropout

    @property
    def embed_dim(self) -> int:
        """Width of the token embedding (OPT's ``word_embed_proj_dim`` may differ from h)."""
        return self.embed_proj_dim or self.hidden

    def layer_shape(self, i: int) -> ModelShape:
        """Layer i as a model of one block kind: this shape, or (a dense-MLP layer of a MoE model, ``dense_mlp``)
        the shape with a dense MLP of ``dense_intermediate`` and no experts; ``n_layers`` is kept."""
        if not self.dense_mlp:
            return self
        if not self.dense_mlp[i]:
            return replace(self, dense_mlp=())
        return replace(self, dense_mlp=(), n_experts=0, experts_per_token=0, intermediate=self.dense_intermediate,
                       shared_intermediate=0)

    def layer_groups(self) -> tuple[tuple[ModelShape, int], ...]:
        """(layer shape, how many layers have it) for each block kind, in the order of their first layer: one
        group for a model whose blocks are all alike."""
        counts: dict[ModelShape, int] = {}
        for i in range(self.n_layers):
            sub = self.layer_shape(i)
            counts[sub] = counts.get(sub, 0) + 1
        return tuple(counts.items())

    def linears(self) -> tuple[Linear, ...]:
        """The linear layers of one decoder block, in forward order, as transformers names them (of layer 0's kind
        where the layers differ: :meth:`layer_shape`)."""
        if self.dense_mlp:
            return self.layer_shape(0).linears()
        n, h, q, kv = self.arch.names.block, self.hidden, self.q_dim, self.kv_dim
        if self.latent is not None:
            attn = _latent_linears(self)
        elif self.layout.fused_qkv:
            attn = [Linear(path=n.qkv, role="qkv", in_features=h, out_features=q + 2 * kv, bias=self.qkv_bias)]
        else:
            attn = [Linear(path=n.q, role="q", in_features=h, out_features=q, bias=self.qkv_bias),
                    Linear(path=n.k, role="k", in_features=h, out_features=kv, bias=self.qkv_bias),
                    Linear(path=n.v, role="v", in_features=h, out_features=kv, bias=self.qkv_bias)]
        if self.latent is None:
            attn.append(Linear(path=n.o, role="o", in_features=q, out_features=h, bias=self.o_bias))
        return tuple(attn) + self._mlp_linears()

    def _mlp_linears(self) -> tuple[Linear, ...]:
        n, h, i, b = self.arch.names.block, self.hidden, self.intermediate, self.mlp_bias
        if self.layout.moe is not None and self.is_moe:
            e = self.n_experts
            bias = self.layout.moe.bias  # GPT-OSS: the router and both expert parameters
            si = self.shared_intermediate
            shared = (Linear(path=n.shared_gate, role="shared_gate", in_features=h, out_features=si),
                      Linear(path=n.shared_up, role="shared_up", in_features=h, out_features=si),
                      Linear(path=n.shared_down, role="shared_down", in_features=si, out_features=h)) if si else ()
            routed = (Linear(path=n.router, role="router", in_features=h, out_features=e, bias=bias,
                             is_nn_linear=False),
                      Linear(path=n.experts_gate_up, role="experts_gate_up", in_features=h, out_features=2 * i,
                             bias=bias, experts=e, is_nn_linear=False),
                      Linear(path=n.experts_down, role="experts_down", in_features=i, out_features=h, experts=e,
                             bias=bias, is_nn_linear=False))
            return routed + shared
        down = Linear(path=n.down, role="down", in_features=i, out_features=h, bias=b)
        if self.layout.mlp == "plain":
            return (Linear(path=n.up, role="up", in_features=h, out_features=i, bias=b), down)
        if self.layout.fused_gate_up:
            return (Linear(path=n.gate_up, role="gate_up", in_features=h, out_features=2 * i, bias=b), down)
        return (Linear(path=n.gate, role="gate", in_features=h, out_features=i, bias=b),
                Linear(path=n.up, role="up", in_features=h, out_features=i, bias=b), down)

    def norms(self) -> tuple[Norm, ...]:
        """The normalisation layers of one decoder block, in forward order, as transformers names them."""
        lay, n, h, b = self.layout, self.arch.names.block, self.hidden, self.layout.norm_bias
        out = []
        if lay.pre_attn_norm:
            out.append(Norm(path=n.pre_attn_norm, role="pre_attn", size=h, bias=b))
        if self.latent is not None:  # MLA: the q bottleneck's norm and the kv latent's
            if self.latent.q_rank:
                out.append(Norm(path=n.q_a_norm, role="q_a", size=self.latent.q_rank, bias=b))
            out.append(Norm(path=n.kv_a_norm, role="kv_a", size=self.latent.kv_rank, bias=b))
        if self.has_qk_norm:
            head = lay.qk_norm == "head"
            out += [Norm(path=n.q_norm, role="q", size=self.head_dim if head else self.q_dim, bias=b),
                    Norm(path=n.k_norm, role="k", size=self.head_dim if head else self.kv_dim, bias=b)]
        if lay.post_attn_norm:
            out.append(Norm(path=n.post_attn_norm, role="post_attn", size=h, bias=b))
        if self.has_pre_mlp_norm:
            out.append(Norm(path=n.pre_mlp_norm, role="pre_mlp", size=h, bias=b))
        if lay.post_mlp_norm:
            out.append(Norm(path=n.post_mlp_norm, role="post_mlp", size=h, bias=b))
        return tuple(out)

    def block_params(self) -> tuple[BlockParam, ...]:
        """The block's other parameters: GPT-OSS's attention sinks, one logit per head (``self_attn.sinks``)."""
        if self.layout.attention_sinks:
            return (BlockParam(path=self.arch.names.block.sinks, size=self.n_heads),)
        return ()

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__
               if f != "arch" and not (f in _SHOWN_WHEN_SET and getattr(self, f) == _SHOWN_WHEN_SET[f])}
        out["model_type"] = self.model_type
        out["layer_types"] = list(self.layer_types)
        if self.dense_mlp:
            out["dense_mlp"] = list(self.dense_mlp)
        if self.latent is not None:
            out["latent"] = {f: getattr(self.latent, f) for f in self.latent.__dataclass_fields__}
        return out

    # ---- constructors --------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: dict[str, Any], *, name: str | None = None) -> ModelShape:
        """Read a Hugging Face config dict (the content of ``config.json``); a MemfitError if it is invalid."""
        return _parse_config(config, name=name)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelShape:
        """Read ``config.json`` from a file, or from a directory that holds one (:func:`read_config_file`)."""
        config, p = read_config_file(path)
        return _parse_config(config, name=p.parent.name if p.name == "config.json" else p.stem)


def _latent_linears(m: ModelShape) -> list[Linear]:
    """Multi-head latent attention's projections (DeepseekV3Attention): q_a (h -> q_rank) and q_b (q_rank -> a*qk),
    or q_proj (h -> a*qk); kv_a_proj_with_mqa (h -> kv_rank + rope), kv_b (kv_rank -> a*(nope + v)); o (a*v -> h).
    ``attention_bias`` gives q_a, kv_a and o a bias."""
    n, h, a, lat, b = m.arch.names.block, m.hidden, m.n_heads, m.latent, m.qkv_bias
    assert lat is not None
    q = ([Linear(path=n.q_a, role="q_a", in_features=h, out_features=lat.q_rank, bias=b),
          Linear(path=n.q_b, role="q_b", in_features=lat.q_rank, out_features=a * lat.qk)] if lat.q_rank
         else [Linear(path=n.q, role="q", in_features=h, out_features=a * lat.qk)])
    return q + [Linear(path=n.kv_a, role="kv_a", in_features=h, out_features=lat.kv_rank + lat.rope, bias=b),
                Linear(path=n.kv_b, role="kv_b", in_features=lat.kv_rank, out_features=a * (lat.nope + lat.v)),
                Linear(path=n.o, role="o", in_features=a * lat.v, out_features=h, bias=m.o_bias)]


# ---- the boundary: validating a config ------------------------------------------------------------

def validate_config(config: dict[str, Any]) -> None:
    """Check a config dict before any engine uses it; a MemfitError naming the field and the fix.

    Architectures the estimate models are checked by reading their :class:`ModelShape` (every rule of the
    module docstring). Others (``memfit trace`` runs any transformers architecture), and configs that leave
    out a key the estimate needs but transformers defaults (an OPT config without ``ffn_dim``), get the same
    checks on the keys they have: each size a positive integer within ``SIZE_LIMITS``, key/value heads
    dividing the heads, experts per token at most the experts.
    """
    cfg = _language_config(config)
    if REGISTRY.get(str(cfg.get("model_type"))) is not None:
        try:
            _parse_config(config, name=None)
            return
        except MissingKey:  # the estimate needs it; transformers has a default: check the keys present
            pass
    ints = {fact: _optional_int(cfg, fact, *keys) for fact, keys in _GENERIC_KEYS.items()}
    heads, kv = ints["attention heads"], ints["key/value heads"]
    if heads and kv:
        check_kv_heads(heads, kv, heads_key=first_key(cfg, *_GENERIC_KEYS["attention heads"]))
    if ints["experts"] and ints["experts per token"]:
        check_experts(ints["experts"], ints["experts per token"],
                       experts_key=first_key(cfg, *_GENERIC_KEYS["experts"]),
                       per_token_key=first_key(cfg, *_GENERIC_KEYS["experts per token"]))


# the keys of each size, as architectures name them (first present wins), for validate_config's generic path
_GENERIC_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden size": ("hidden_size", "n_embd", "d_model"),
    "attention heads": ("num_attention_heads", "n_head"),
    "key/value heads": ("num_key_value_heads",),
    "head dimension": ("head_dim",),
    "intermediate size": ("intermediate_size", "ffn_dim", "n_inner"),
    "vocabulary": ("vocab_size",),
    "positions": ("max_position_embeddings", "n_positions"),
    "experts": ("num_local_experts", "num_experts"),
    "experts per token": ("num_experts_per_tok",),
}


def _optional_int(cfg: dict[str, Any], fact: str, *keys: str) -> int | None:
    key = first_key(cfg, *keys)
    value = cfg.get(key)
    return None if value is None else check_int(fact, key, value)


def _language_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config of the language model: ``cfg`` itself, or its ``text_config`` (multimodal configs): a config
    without a model_type, or whose model_type memfit does not model while its ``text_config`` names one it does
    (Gemma 3's ``gemma3`` config.json holds the ``gemma3_text`` language model)."""
    for _ in range(_MAX_TEXT_CONFIG_DEPTH):
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            break
        if cfg.get("model_type") and (str(cfg.get("model_type")) in REGISTRY
                                      or str(text.get("model_type")) not in REGISTRY):
            break
        cfg = text
    return cfg


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config dict of ``config`` (:func:`_language_config`): what trace and measure build
    and train, so that every engine runs the model the estimate reads (a multimodal config's text model)."""
    return _language_config(config)


# ---- the reader ------------------------------------------------------------------------------

def _architecture(cfg: dict[str, Any]) -> Architecture:
    """The registry entry of ``cfg``'s ``model_type``; a MemfitError naming what is supported otherwise."""
    supported = ", ".join(REGISTRY)
    model_type = cfg.get("model_type")
    if not model_type:
        raise MemfitError("config has no model_type: it must be a Hugging Face config.json "
                          f"(supported model_type: {supported})")
    arch = REGISTRY.get(str(model_type))
    if arch is not None:
        return arch
    if cfg.get("is_encoder_decoder"):
        raise MemfitError(f"model_type {str(model_type)!r} is an encoder-decoder (sequence-to-sequence) model, "
                          "is_encoder_decoder: true: memfit models decoder-only causal-LM fine-tuning "
                          f"({supported}; trace: any AutoModelForCausalLM); this architecture is not supported")
    raise MemfitError(f"model_type {str(model_type)!r} is not supported yet; supported: {supported} (for other "
                      "architectures, `memfit trace` runs the real model code)")


def _parse_config(config: dict[str, Any], *, name: str | None) -> ModelShape:
    cfg = _language_config(config)
    arch = _architecture(cfg)
    k, r, model_type = arch.keys, ConfigReader(cfg, arch.model_type), arch.model_type
    for key, modelled, variant in k.not_modelled:
        if r.get(key, default=modelled) != modelled:
            raise NotModelled(f"{key}: {json.dumps(r.get(key))} selects {variant}, which memfit estimate does not "
                              f"model for "
                              f"{model_type}: run `memfit trace` or `memfit measure` (the real model code)")
    n_layers = r.need("layers", *k.layers)
    hidden = r.need("hidden size", *k.hidden)
    n_heads = r.need("attention heads", *k.heads)
    n_kv, head_dim = read_heads(r, k, hidden, n_heads)
    vocab = r.need("vocabulary", *k.vocab)
    activation = k.activation.read(r)
    dropout = {"attention_dropout": k.attention_dropout.read(r), "residual_dropout": k.residual_dropout.read(r),
               "embedding_dropout": k.embedding_dropout.read(r)}
    if k.attn_residual_dropout is not None:
        dropout["attn_residual_dropout"] = k.attn_residual_dropout.read(r)
    intermediate = k.intermediate.read(r, hidden=hidden)
    proj = r.size("hidden size", *k.embed_proj_dim, default=hidden) if k.embed_proj_dim else hidden
    window = k.sliding_window.read(r) if k.sliding_enabled.read(r) else None
    n_experts, per_token = read_experts(r, k)
    latent = k.latent.read(r) if k.latent is not None and arch.layout.latent_attention else None
    dense = k.dense_layers.read(r, n_layers) if k.dense_layers is not None else ()
    moe = arch.layout.moe
    shared = k.shared_experts.read(r) if k.shared_experts is not None and moe and moe.shared_experts else 0
    return ModelShape(
        **dropout, name=name or str(r.get("_name_or_path", default=model_type)) or model_type, arch=arch,
        n_layers=n_layers, hidden=hidden, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=latent.rope if latent is not None else head_dim, latent=latent,  # MLA: head_dim is the rope width
        dense_mlp=dense if any(dense) else (), dense_intermediate=k.dense_layers.intermediate.read(r) if any(dense)
        and k.dense_layers is not None else 0, shared_intermediate=shared * intermediate,
        intermediate=intermediate, vocab=vocab, activation=activation, rope_theta=rope_theta(cfg, model_type),
        tie_embeddings=k.tie_embeddings.read(r), norm_eps=k.norm_eps.read(r), max_positions=k.positions.read(r),
        rotary_fraction=k.rotary_fraction.read(r), qkv_bias=k.qkv_bias.read(r), o_bias=k.o_bias.read(r),
        mlp_bias=k.mlp_bias.read(r), parallel_residual=k.parallel_residual.read(r),
        embed_proj_dim=proj if proj != hidden else 0,
        final_norm=k.final_norm.read(r) and not k.final_norm_dropped.read(r),
        attn_softcap=k.attn_softcap.read(r), final_softcap=k.final_softcap.read(r), sliding_window=window,
        layer_types=read_layer_types(r, arch, n_layers, window), n_experts=n_experts, experts_per_token=per_token,
        qk_norm_enabled=k.qk_norm_enabled.read(r),
        multi_query=k.multi_query.read(r), router_renorm=k.router_renorm.read(r),
    )
