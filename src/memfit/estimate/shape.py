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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.arch import REGISTRY, Architecture, BlockLayout, ConfigKeys, ConfigReader, LayerType, MissingKey
from memfit.estimate.arch.keys import NotModelled, check_int, first_key
from memfit.estimate.block_parts import BlockParam, Linear, Norm
from memfit.estimate.config_file import read_config_file

_MAX_TEXT_CONFIG_DEPTH = 4  # multimodal configs nest the language model's config once (text_config)


def _dropout_fields() -> dict[str, dict[str, tuple[str, float]]]:
    return {t: a.keys.dropout_fields() for t, a in REGISTRY.items()}


# model_type -> ModelShape dropout field -> (config key, the config class's default): a view of the registry's
# ConfigKeys (``attention_dropout``, ``residual_dropout``, ``embedding_dropout``).
DROPOUT_FIELDS: dict[str, dict[str, tuple[str, float]]] = _dropout_fields()


# ModelShape fields that only some architectures have, and the value to_dict leaves them out at
_SHOWN_WHEN_SET = {"attn_residual_dropout": None, "multi_query": False, "router_renorm": True}


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

    def linears(self) -> tuple[Linear, ...]:
        """The linear layers of one decoder block, in forward order, as transformers names them."""
        n, h, q, kv = self.arch.names.block, self.hidden, self.q_dim, self.kv_dim
        if self.layout.fused_qkv:
            attn = [Linear(path=n.qkv, role="qkv", in_features=h, out_features=q + 2 * kv, bias=self.qkv_bias)]
        else:
            attn = [Linear(path=n.q, role="q", in_features=h, out_features=q, bias=self.qkv_bias),
                    Linear(path=n.k, role="k", in_features=h, out_features=kv, bias=self.qkv_bias),
                    Linear(path=n.v, role="v", in_features=h, out_features=kv, bias=self.qkv_bias)]
        attn.append(Linear(path=n.o, role="o", in_features=q, out_features=h, bias=self.o_bias))
        return tuple(attn) + self._mlp_linears()

    def _mlp_linears(self) -> tuple[Linear, ...]:
        n, h, i, b = self.arch.names.block, self.hidden, self.intermediate, self.mlp_bias
        if self.layout.moe is not None:
            e = self.n_experts
            bias = self.layout.moe.bias  # GPT-OSS: the router and both expert parameters
            return (Linear(path=n.router, role="router", in_features=h, out_features=e, bias=bias, is_nn_linear=False),
                    Linear(path=n.experts_gate_up, role="experts_gate_up", in_features=h, out_features=2 * i,
                           bias=bias, experts=e, is_nn_linear=False),
                    Linear(path=n.experts_down, role="experts_down", in_features=i, out_features=h, experts=e,
                           bias=bias, is_nn_linear=False))
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
        _check_kv_heads(heads, kv, heads_key=first_key(cfg, *_GENERIC_KEYS["attention heads"]))
    if ints["experts"] and ints["experts per token"]:
        _check_experts(ints["experts"], ints["experts per token"],
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


def _divisors(n: int) -> str:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return ", ".join(str(d) for d in sorted(set(small + [n // d for d in small])))


def _check_kv_heads(heads: int, kv: int, *, heads_key: str) -> None:
    if heads % kv:
        more = f"more key/value heads than the {heads} heads; " if kv > heads else ""
        raise MemfitError(f"num_key_value_heads {kv} does not divide {heads_key} {heads} ({more}grouped-query "
                          f"attention shares each key/value head among {heads_key} / num_key_value_heads query "
                          f"heads): set num_key_value_heads to one of {_divisors(heads)}")


def _check_experts(experts: int, per_token: int, *, experts_key: str, per_token_key: str) -> None:
    if per_token > experts:
        raise MemfitError(f"{per_token_key} {per_token} is more than the {experts} experts ({experts_key}): each "
                          f"token picks {per_token_key} of them; set it to at most {experts}")


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


def _rope_theta(cfg: dict[str, Any], model_type: str) -> float | None:
    if cfg.get("rope_theta") is not None:
        return ConfigReader(cfg, model_type).real_or_none("rope_theta")
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        if "rope_theta" in params:
            return ConfigReader(params, model_type).real_or_none("rope_theta")
        # per-layer-type layouts (e.g. {"full_attention": {...}, "sliding_attention": {...}})
        for sub in params.values():
            if isinstance(sub, dict) and "rope_theta" in sub:
                return ConfigReader(sub, model_type).real_or_none("rope_theta")
    return None


def _heads(r: ConfigReader, k: ConfigKeys, hidden: int, n_heads: int) -> tuple[int, int]:
    """Key/value heads and head_dim, checked: (k, d)."""
    cfg, model_type = r.cfg, r.model_type
    heads_key = first_key(cfg, *k.heads)
    if hidden % n_heads and k.heads_divide_hidden:
        hidden_key = first_key(cfg, *k.hidden)
        raise MemfitError(f"{hidden_key} {hidden} is not divisible by {heads_key} {n_heads}: transformers' "
                          f"{model_type} splits the hidden size evenly across the heads; set {heads_key} to a "
                          f"divisor of {hidden} ({_divisors(hidden)})")
    if k.multi_query.read(r):  # Falcon's multi_query: one key/value head, d = h / a
        n_kv, head_dim = 1, hidden // n_heads
    elif not k.kv_heads:  # multi-head attention; transformers ignores both keys
        n_kv, head_dim = n_heads, hidden // n_heads
    else:
        if k.kv_heads[0] in cfg:  # null: = heads, as the config classes' __post_init__ do
            n_kv = r.size("key/value heads", *k.kv_heads, default=n_heads)
        else:
            n_kv = k.kv_heads_default or n_heads
        head_dim = r.size("head dimension", "head_dim", default=k.head_dim_default or hidden // n_heads)
        if head_dim < 1:
            raise MemfitError(f"{heads_key} {n_heads} is more than the hidden size {hidden}: every head needs at "
                              "least one dimension; fix it in config.json (or give head_dim)")
    _check_kv_heads(n_heads, n_kv, heads_key=heads_key)
    return n_kv, head_dim


def _layer_types(r: ConfigReader, arch: Architecture, n_layers: int, window: int | None) -> tuple[LayerType, ...]:
    """Each layer's attention: ``sliding`` where the window applies (the layout's rule, or the config's own
    ``layer_types`` list), else ``full``."""
    rule = arch.layout.sliding_layers
    if window is None or rule == "none":
        return (_layer_type(False),) * n_layers
    listed = r.get(*arch.keys.layer_types) if arch.keys.layer_types else None
    if listed is not None:
        if not isinstance(listed, list) or len(listed) != n_layers or any(
                t not in ("full_attention", "sliding_attention") for t in listed):
            raise MemfitError(f"config field layer_types must list {n_layers} entries, each full_attention or "
                              f"sliding_attention (one per layer), got {listed!r}: fix it in config.json")
        return tuple(_layer_type(t == "sliding_attention") for t in listed)
    first_sliding = arch.keys.max_window_layers.read(r) if rule == "after_max_window_layers" else 0
    period = arch.keys.sliding_pattern.read(r) if rule == "pattern" else 1
    sliding = [rule == "all" or (rule == "alternate" and i % 2 == 0)
               or (rule == "after_max_window_layers" and i >= first_sliding)
               or (rule == "pattern" and (i + 1) % period != 0) for i in range(n_layers)]
    return tuple(_layer_type(s) for s in sliding)


def _layer_type(sliding: bool) -> LayerType:
    return "sliding" if sliding else "full"


def _experts(r: ConfigReader, k: ConfigKeys) -> tuple[int, int]:
    if k.experts is None or k.experts_per_token is None:
        return 0, 0
    n_experts, per_token = k.experts.read(r), k.experts_per_token.read(r)
    _check_experts(n_experts, per_token, experts_key=k.experts.names[0], per_token_key=k.experts_per_token.names[0])
    return n_experts, per_token


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
    n_kv, head_dim = _heads(r, k, hidden, n_heads)
    vocab = r.need("vocabulary", *k.vocab)
    activation = k.activation.read(r)
    dropout = {"attention_dropout": k.attention_dropout.read(r), "residual_dropout": k.residual_dropout.read(r),
               "embedding_dropout": k.embedding_dropout.read(r)}
    if k.attn_residual_dropout is not None:
        dropout["attn_residual_dropout"] = k.attn_residual_dropout.read(r)
    intermediate = k.intermediate.read(r, hidden=hidden)
    proj = r.size("hidden size", *k.embed_proj_dim, default=hidden) if k.embed_proj_dim else hidden
    window = k.sliding_window.read(r) if k.sliding_enabled.read(r) else None
    n_experts, per_token = _experts(r, k)
    return ModelShape(
        **dropout, name=name or str(r.get("_name_or_path", default=model_type)) or model_type, arch=arch,
        n_layers=n_layers, hidden=hidden, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, activation=activation, rope_theta=_rope_theta(cfg, model_type),
        tie_embeddings=k.tie_embeddings.read(r), norm_eps=k.norm_eps.read(r), max_positions=k.positions.read(r),
        rotary_fraction=k.rotary_fraction.read(r), qkv_bias=k.qkv_bias.read(r), o_bias=k.o_bias.read(r),
        mlp_bias=k.mlp_bias.read(r), parallel_residual=k.parallel_residual.read(r),
        embed_proj_dim=proj if proj != hidden else 0,
        final_norm=k.final_norm.read(r) and not k.final_norm_dropped.read(r),
        attn_softcap=k.attn_softcap.read(r), final_softcap=k.final_softcap.read(r), sliding_window=window,
        layer_types=_layer_types(r, arch, n_layers, window), n_experts=n_experts, experts_per_token=per_token,
        qk_norm_enabled=k.qk_norm_enabled.read(r),
        multi_query=k.multi_query.read(r), router_renorm=k.router_renorm.read(r),
    )
