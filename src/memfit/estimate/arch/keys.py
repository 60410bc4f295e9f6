"""Where each fact sits in an architecture's ``config.json``, and what transformers 5.24 uses when it is absent.

Every key type names the config keys that may hold the fact, first present (and not null) wins, and the
default of the architecture's config class (``transformers/models/<type>/configuration_<type>.py``); a key
tuple of ``()`` means the architecture does not read the fact from its config (the default is fixed in its
modeling code, e.g. Qwen2's q/k/v bias). A ``Size`` without a default is required: the estimate refuses a
config without it (``trace`` may still run it, on transformers' own default).

:class:`ConfigReader` reads the values, checking each size against ``SIZE_LIMITS``: the one boundary every
engine's config crosses (:func:`memfit.estimate.shape.validate_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from memfit.errors import MemfitError
from memfit.estimate.block_parts import Latent

# Upper bounds on a config's sizes. The largest published models stay far below them (Llama-3.1-405B:
# 126 layers, hidden 16,384, intermediate 53,248, 128 heads, head_dim 128; Gemma 2: vocabulary 256,000;
# Llama 4 Scout: 10,485,760 positions), so a value above one is a typo, and refusing it keeps every
# tensor's element count far inside int64 for trace and measure.
SIZE_LIMITS: dict[str, int] = {
    "layers": 1_024,
    "hidden size": 131_072,
    "attention heads": 16_384,
    "key/value heads": 16_384,
    "head dimension": 8_192,
    "intermediate size": 1_048_576,
    "vocabulary": 4_194_304,
    "positions": 67_108_864,
    "experts": 4_096,
    "experts per token": 4_096,
}


def first_key(cfg: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` present (not null) in ``cfg``, else the first one."""
    return next((k for k in keys if cfg.get(k) is not None), keys[0])


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def check_int(fact: str, key: str, value: Any) -> int:
    """``value`` as a positive integer within ``SIZE_LIMITS[fact]``, else a MemfitError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise MemfitError(f"config field {key} must be a positive integer, got {value!r}: fix it in "
                          "config.json (the model's card on the Hub has the real value)")
    limit = SIZE_LIMITS[fact]
    if value > limit:
        raise MemfitError(f"config field {key} is {value:,}: memfit accepts {fact} up to {limit:,} (real models "
                          "stay far below it); fix it in config.json")
    return value


class MissingKey(MemfitError):
    """A size the estimate needs is absent from the config (transformers may still have a default for it)."""


class NotModelled(MissingKey):
    """The config selects a variant of its architecture the estimate does not model (Falcon's
    ``new_decoder_architecture``); transformers builds it, so ``trace`` and ``measure`` still run it."""


class ConfigReader:
    """Typed reads from one config dict, each a MemfitError naming the field when the value is unusable."""

    def __init__(self, cfg: dict[str, Any], model_type: str):
        self.cfg = cfg
        self.model_type = model_type

    def need(self, fact: str, *keys: str) -> int:
        """A required size: a positive integer within ``SIZE_LIMITS[fact]``."""
        value = _first(self.cfg, *keys)
        if value is None:
            raise MissingKey(f"the {self.model_type} config lacks {' / '.join(keys)}: add it to config.json "
                             "(copy it from the model's card on the Hub)")
        return check_int(fact, first_key(self.cfg, *keys), value)

    def size(self, fact: str, *keys: str, default: int) -> int:
        """An optional size: ``default`` when absent or null, else checked as :meth:`need` does."""
        value = _first(self.cfg, *keys)
        return default if value is None else check_int(fact, first_key(self.cfg, *keys), value)

    def real(self, *keys: str, default: float) -> float:
        """An optional number (``rms_norm_eps``, ``rotary_pct`` ...): ``default`` when absent or null."""
        value = self.real_or_none(*keys) if keys else None
        return default if value is None else value

    def real_or_none(self, *keys: str) -> float | None:
        value = _first(self.cfg, *keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MemfitError(f"config field {first_key(self.cfg, *keys)} must be a number, got {value!r}: fix it "
                              "in config.json")
        return float(value)

    def get(self, *keys: str, default: Any = None) -> Any:
        return _first(self.cfg, *keys, default=default)

    def present(self, *keys: str) -> bool:
        """Whether any of ``keys`` is in the config, null included (an explicit null switches a feature off)."""
        return any(k in self.cfg for k in keys)


@dataclass(frozen=True, slots=True)
class Size:
    """A size (``SIZE_LIMITS[fact]``); ``default`` None: required; ``per_hidden``: default = per_hidden * h."""

    fact: str
    names: tuple[str, ...]
    default: int | None = None
    per_hidden: int = 0

    def read(self, r: ConfigReader, *, hidden: int = 0) -> int:
        if self.per_hidden:
            return r.size(self.fact, *self.names, default=self.per_hidden * hidden)
        if self.default is None:
            return r.need(self.fact, *self.names)
        return r.size(self.fact, *self.names, default=self.default) if self.names else self.default


@dataclass(frozen=True, slots=True)
class Window:
    """An optional size that an explicit null switches off (the sliding window): absent -> ``default``."""

    names: tuple[str, ...]
    default: int | None = None

    def read(self, r: ConfigReader) -> int | None:
        if not self.names or not r.present(*self.names):
            return self.default
        value = r.get(*self.names)
        return None if value is None else check_int("positions", first_key(r.cfg, *self.names), value)


@dataclass(frozen=True, slots=True)
class Flag:
    names: tuple[str, ...]
    default: bool

    def read(self, r: ConfigReader) -> bool:
        return bool(r.get(*self.names, default=self.default)) if self.names else self.default


@dataclass(frozen=True, slots=True)
class Real:
    names: tuple[str, ...]
    default: float

    def read(self, r: ConfigReader) -> float:
        return r.real(*self.names, default=self.default)


@dataclass(frozen=True, slots=True)
class Cap:
    """An optional number that an explicit null switches off (Gemma 2's soft-capping): absent -> ``default``."""

    names: tuple[str, ...]
    default: float | None = None

    def read(self, r: ConfigReader) -> float | None:
        if not self.names or not r.present(*self.names):
            return self.default
        return r.real_or_none(*self.names)


@dataclass(frozen=True, slots=True)
class Text:
    names: tuple[str, ...]
    default: str

    def read(self, r: ConfigReader) -> str:
        return str(r.get(*self.names, default=self.default))


@dataclass(frozen=True, slots=True)
class Dropout:
    """A dropout probability (``default`` when absent or null), in [0, 1)."""

    name: str
    default: float

    def read(self, r: ConfigReader) -> float:
        value = r.cfg.get(self.name) if self.name else None
        if value is None:
            return self.default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise MemfitError(f"config field {self.name} must be a dropout probability in [0, 1), got {value!r}: "
                              "fix config.json")
        return float(value)


_NO_DROPOUT = Dropout("", 0.0)


def _count(r: ConfigReader, key: str, default: int, *, least: int) -> int:
    value = r.get(key, default=default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= SIZE_LIMITS["layers"]:
        raise MemfitError(f"config field {key} must be an integer from {least} to {SIZE_LIMITS['layers']}, got "
                          f"{value!r}: fix it in config.json")
    return value


@dataclass(frozen=True, slots=True)
class LatentKeys:
    """Multi-head latent attention's sizes under ``DeepseekV3Config``'s keys and defaults (q_lora_rank 1536: an
    explicit null means one q projection, no bottleneck)."""

    q_rank: int | None = 1536
    kv_rank: int = 512
    nope: int = 128
    rope: int = 64
    v: int = 128

    def read(self, r: ConfigReader) -> Latent:
        q_rank = (None if r.present("q_lora_rank") and r.get("q_lora_rank") is None
                  else r.size("intermediate size", "q_lora_rank", default=self.q_rank or 0))
        return Latent(q_rank=q_rank or 0, kv_rank=r.size("intermediate size", "kv_lora_rank", default=self.kv_rank),
                      nope=r.size("head dimension", "qk_nope_head_dim", default=self.nope),
                      rope=r.size("head dimension", "qk_rope_head_dim", default=self.rope),
                      v=r.size("head dimension", "v_head_dim", default=self.v))


@dataclass(frozen=True, slots=True)
class DenseLayers:
    """Which layers of a MoE model have a dense MLP of ``intermediate`` instead of the experts:

    - ``first_k``: layers below ``first_k_dense_replace`` (DeepSeek-V3, default 3: ``layer_idx >=
      first_k_dense_replace`` gets the MoE);
    - ``listed_or_step``: Qwen3-MoE's ``mlp_only_layers`` (a list of indices, default []) and the layers i with
      ``(i + 1) % decoder_sparse_step != 0`` (default 1: none).
    """

    rule: Literal["first_k", "listed_or_step"]
    intermediate: Size
    first_k_default: int = 3

    def read(self, r: ConfigReader, n_layers: int) -> tuple[bool, ...]:
        if self.rule == "first_k":
            first = _count(r, "first_k_dense_replace", self.first_k_default, least=0)
            return tuple(i < first for i in range(n_layers))
        listed = r.get("mlp_only_layers", default=[])
        if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in listed):
            raise MemfitError(f"config field mlp_only_layers must be a list of layer indices, got {listed!r}: fix "
                              "it in config.json")
        step = _count(r, "decoder_sparse_step", 1, least=1)
        return tuple(i in listed or (i + 1) % step != 0 for i in range(n_layers))


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigKeys:
    """Every fact the estimate reads from an architecture's config. Defaults are ``LlamaConfig``'s.

    - sizes: the first name of each tuple is what the config class itself writes (:meth:`write` uses it);
      ``kv_heads`` ``()`` means multi-head attention only (GPT-2, GPT-NeoX, OPT: the keys ``num_key_value_heads``
      and ``head_dim`` are ignored, d = h / a); ``kv_heads_default`` / ``head_dim_default`` None: = heads,
      = h / a; ``heads_divide_hidden``: transformers refuses h % a != 0 even with an explicit head_dim.
    - ``embed_proj_dim``: OPT's ``word_embed_proj_dim`` (token embeddings narrower than h, projected in/out).
    - ``final_norm`` and ``final_norm_dropped``: the final norm exists when the first is true and the second false
      (OPT: ``do_layer_norm_before`` and ``_remove_final_layer_norm``).
    - ``sliding_enabled``: Qwen2/3's ``use_sliding_window`` (false: no window whatever ``sliding_window`` says);
      ``max_window_layers``: the first layer that slides under ``after_max_window_layers``; ``layer_types``:
      the config may list each layer's attention type.
    - dropout: ``attention_dropout`` on the attention probabilities; ``residual_dropout`` on each sub-layer's
      output before its residual add; ``embedding_dropout`` on the embedding output (what the modeling code
      applies in ``train()``; a key the config has but the code never applies is not listed: Phi-3's
      ``embd_pdrop``).
    - ``sliding_pattern``: the period of ``BlockLayout.sliding_layers="pattern"`` (Gemma 3's
      ``sliding_window_pattern``, 6 by default).
    - ``qk_norm_enabled``: whether the layout's q/k norms exist in this config (Phi's ``qk_layernorm``, default
      false); ``Flag((), True)``: always, where the layout has them.
    - ``multi_query``: a flag that, when true, gives one key/value head (Falcon's ``multi_query``; false: as
      many as heads, with ``kv_heads`` ``()``).
    - ``attn_residual_dropout``: the dropout on the attention output before its residual add where it is not
      ``residual_dropout`` (Falcon's serial block: ``attention_dropout``); None: ``residual_dropout``.
    - ``not_modelled``: (key, the value memfit models, what another value selects): a config giving the key
      another value (null counts as absent) is refused by the estimate with :class:`NotModelled` (``trace`` and
      ``measure`` run it): Falcon's ``new_decoder_architecture``, Qwen3-MoE's dense layers.
    - ``router_renorm``: MoE top-k weights divided by their sum (Mixtral always; Qwen3-MoE's ``norm_topk_prob``).
    - ``scales_with_head_dim``: keys whose value is per head (Gemma 2's ``query_pre_attn_scalar``), which a
      model scaled to another head_dim sets to it; ``scales_with_hidden``: sizes a model scaled to another hidden
      size scales with it (DeepSeek's latent ranks, per-head widths and dense MLP).
    - ``latent``: multi-head latent attention's keys (``BlockLayout.latent_attention``); ``dense_layers``: which
      layers of a MoE model have a dense MLP (:class:`DenseLayers`); ``shared_experts``: the number of shared
      experts (``MoeLayout.shared_experts``: DeepSeek's ``n_shared_experts``, default 1); ``expert_groups``: the
      keys of the router's expert groups and of the groups each token picks from, with their defaults (DeepSeek's
      ``n_group`` 8 and ``topk_group`` 4), which a config with other experts than the real model's
      (:meth:`moe_sizes`) sets to one group; ``kv_heads_equal``: a multi-head
      architecture's key/value-heads key that must equal the heads (DeepSeek's ``num_key_value_heads``, default
      ``kv_heads_default``: transformers repeats the expanded keys otherwise), which :meth:`write` sets to them.
    """

    layers: tuple[str, ...] = ("num_hidden_layers", "n_layer", "num_layers")
    hidden: tuple[str, ...] = ("hidden_size", "n_embd", "d_model")
    heads: tuple[str, ...] = ("num_attention_heads", "n_head")
    kv_heads: tuple[str, ...] = ("num_key_value_heads",)
    kv_heads_default: int | None = None
    head_dim_default: int | None = None
    heads_divide_hidden: bool = False
    vocab: tuple[str, ...] = ("vocab_size",)
    intermediate: Size = Size("intermediate size", ("intermediate_size",))
    positions: Size = Size("positions", ("max_position_embeddings",), 2048)
    activation: Text = Text(("hidden_act", "hidden_activation", "activation_function"), "silu")
    norm_eps: Real = Real(("rms_norm_eps",), 1e-6)
    tie_embeddings: Flag = Flag(("tie_word_embeddings",), False)
    rotary_fraction: Real = Real(("partial_rotary_factor",), 1.0)
    qkv_bias: Flag = Flag(("attention_bias",), False)
    o_bias: Flag = Flag(("attention_bias",), False)
    mlp_bias: Flag = Flag((), False)
    parallel_residual: Flag = Flag((), False)
    embed_proj_dim: tuple[str, ...] = ()
    final_norm: Flag = Flag((), True)
    final_norm_dropped: Flag = Flag((), False)
    attn_softcap: Cap = Cap(())
    final_softcap: Cap = Cap(())
    sliding_window: Window = Window(())
    sliding_enabled: Flag = Flag((), True)
    max_window_layers: Size = Size("layers", (), 0)
    layer_types: tuple[str, ...] = ()
    experts: Size | None = None
    experts_per_token: Size | None = None
    attention_dropout: Dropout = Dropout("attention_dropout", 0.0)
    residual_dropout: Dropout = _NO_DROPOUT
    embedding_dropout: Dropout = _NO_DROPOUT
    scales_with_head_dim: tuple[str, ...] = ()
    qk_norm_enabled: Flag = Flag((), True)
    sliding_pattern: Size = Size("layers", (), 1)
    multi_query: Flag = Flag((), False)
    attn_residual_dropout: Dropout | None = None
    not_modelled: tuple[tuple[str, Any, str], ...] = ()
    router_renorm: Flag = Flag((), True)
    scales_with_hidden: tuple[str, ...] = ()
    latent: LatentKeys | None = None
    dense_layers: DenseLayers | None = None
    shared_experts: Size | None = None
    expert_groups: tuple[tuple[str, int], ...] = ()
    kv_heads_equal: str = ""

    def dropout_fields(self) -> dict[str, tuple[str, float]]:
        """ModelShape dropout field -> (config key, the config class's default), for the dropouts applied."""
        fields = {"attention_dropout": self.attention_dropout, "residual_dropout": self.residual_dropout,
                  "embedding_dropout": self.embedding_dropout}
        if self.attn_residual_dropout is not None:
            fields["attn_residual_dropout"] = self.attn_residual_dropout
        return {f: (d.name, d.default) for f, d in fields.items() if d.name}

    def moe_sizes(self, experts: int, per_token: int) -> dict[str, Any]:
        """The experts and experts per token under this architecture's keys ({} for a dense one).

        >>> ConfigKeys(experts=Size("experts", ("num_experts",), 128),
        ...            experts_per_token=Size("experts per token", ("num_experts_per_tok",), 8)).moe_sizes(4, 2)
        {'num_experts': 4, 'num_experts_per_tok': 2}
        """
        if self.experts is None or self.experts_per_token is None:
            return {}
        groups = {key: 1 for key, _ in self.expert_groups}  # DeepSeek's n_group / topk_group: one group of them all
        return {self.experts.names[0]: experts, self.experts_per_token.names[0]: per_token, **groups}

    def write(self, *, layers: int, hidden: int, heads: int, kv_heads: int | None = None,
              intermediate: int | None = None, vocab: int | None = None,
              positions: int | None = None) -> dict[str, Any]:
        """A config dict of these sizes under the keys this architecture's config class reads (``n_layer`` for
        GPT-2, ``ffn_dim`` for OPT ...); kv heads only where the architecture reads them.

        >>> ConfigKeys().write(layers=2, hidden=64, heads=4, kv_heads=2)
        {'num_hidden_layers': 2, 'hidden_size': 64, 'num_attention_heads': 4, 'num_key_value_heads': 2}
        """
        out: dict[str, Any] = {self.layers[0]: layers, self.hidden[0]: hidden, self.heads[0]: heads}
        if kv_heads is not None and self.kv_heads:
            out[self.kv_heads[0]] = kv_heads
        if self.kv_heads_equal:
            out[self.kv_heads_equal] = heads
        if intermediate is not None:
            out[self.intermediate.names[0]] = intermediate
        if vocab is not None:
            out[self.vocab[0]] = vocab
        if positions is not None:
            out[self.positions.names[0]] = positions
        return out
