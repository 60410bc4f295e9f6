"""ModelShape: the facts about a decoder-only transformer that memory depends on, read from a
Hugging Face ``config.json`` without importing torch.

Real configs come in several generations and dialects. The reader accepts all of them:

=====================  ==========================================================================
fact                   keys read (first present wins)
=====================  ==========================================================================
layers                 num_hidden_layers, n_layer, num_layers
hidden                 hidden_size, n_embd, d_model
heads                  num_attention_heads, n_head
kv heads               num_key_value_heads (absent: transformers' default for the architecture, see
                       ``KV_HEADS_DEFAULT``; null: heads); GPT-2, GPT-NeoX and OPT have none (= heads)
head_dim               head_dim (absent or null: ``HEAD_DIM_DEFAULT``, else hidden // heads); GPT-2,
                       GPT-NeoX and OPT always use hidden // heads
intermediate           intermediate_size, ffn_dim, n_inner (default 4*hidden for gpt2)
vocab                  vocab_size
rotary base            rope_theta, rope_parameters.rope_theta, rope_scaling (v4 and v5 layouts)
activation             hidden_activation, hidden_act, activation_function
tied embeddings        tie_word_embeddings (per-architecture default as transformers has it)
experts                num_local_experts, num_experts_per_tok (Mixtral; transformers' defaults 8, 2)
dropout                :data:`DROPOUT_FIELDS` (per architecture, with the config class's default)
=====================  ==========================================================================

The reader is the boundary every engine crosses (:func:`validate_config`; ``trace`` and ``measure`` build
the transformers config from the same dict only after it): sizes must be positive integers within
``SIZE_LIMITS``, key/value heads must divide the heads, the heads must divide the hidden size where
transformers requires it (``HEADS_DIVIDE_HIDDEN``), and a token may not pick more experts than there are.
:func:`read_config_file` reads a ``config.json`` of at most ``MAX_CONFIG_BYTES``.
"""

from __future__ import annotations

import json
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from memfit.errors import MemfitError

NormKind = Literal["rmsnorm", "layernorm"]
MlpKind = Literal["gated", "plain"]
PositionKind = Literal["rotary", "learned"]

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
    "mixtral",
)

# PEFT's default LoRA targets per architecture (peft.utils.constants
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), used when --targets is not given. PEFT has none for
# phi3: there memfit, like PEFT, asks for --targets.
DEFAULT_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "opt": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
}

# What transformers 5.24 uses when a config leaves the key out (the config classes' field defaults in
# transformers/models/<type>/configuration_<type>.py; an explicit null means "= heads" where the class's
# __post_init__ says so). llama and phi3 default to the number of heads.
KV_HEADS_DEFAULT: dict[str, int] = {"mistral": 8, "mixtral": 8, "qwen2": 32, "qwen3": 32, "gemma": 16, "gemma2": 4}
HEAD_DIM_DEFAULT: dict[str, int] = {"qwen3": 128, "gemma": 256, "gemma2": 256}
MIXTRAL_EXPERTS_DEFAULT = (8, 2)  # MixtralConfig num_local_experts, num_experts_per_tok

# Architectures whose transformers code requires hidden % heads == 0 even with an explicit head_dim
# (LlamaConfig / Gemma2Config / GPTNeoXConfig.validate_architecture; GPT2Attention and OPTAttention raise in
# __init__). The others project to heads * head_dim and back, whatever the hidden size.
HEADS_DIVIDE_HIDDEN = frozenset({"llama", "gemma2", "gpt2", "gpt_neox", "opt"})

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

MAX_CONFIG_BYTES = 16 * 1024**2  # 16 MiB (16,777,216 B): real config.json files are a few kB
_MAX_TEXT_CONFIG_DEPTH = 4  # multimodal configs nest the language model's config once (text_config)


# The dropout probabilities each architecture trains with, as transformers 5.24's modeling code applies them
# (``nn.Dropout`` / ``F.dropout`` / the ``dropout=`` of the attention interface, only in ``train()`` mode):
# ModelShape field -> (config key, the config class's default when the key is absent).
#
# - ``attention_dropout``: on the attention probabilities (eager: ``F.dropout(softmax(...))`` before the
#   product with v; sdpa / flash: the kernel's ``dropout_p``). Every architecture.
# - ``residual_dropout``: on each sub-layer's output before the residual add (after the attention output
#   projection and after the MLP's down projection): GPT-2 ``resid_pdrop`` (``attn.resid_dropout``,
#   ``mlp.dropout``), OPT ``dropout`` (``F.dropout`` after ``self_attn`` and after ``fc2``), GPT-NeoX
#   ``hidden_dropout`` (``post_attention_dropout``, ``post_mlp_dropout``), Phi-3 ``resid_pdrop``
#   (``resid_attn_dropout``, ``resid_mlp_dropout``).
# - ``embedding_dropout``: on the embedding output: GPT-2 ``embd_pdrop`` (``transformer.drop``, after the
#   token + position sum), GPT-NeoX ``hidden_dropout`` (``emb_dropout``). Phi-3's config has ``embd_pdrop``
#   but its 5.24 modeling code never applies it; OPT's decoder stores ``dropout`` but applies it only in
#   the layers.
DROPOUT_FIELDS: dict[str, dict[str, tuple[str, float]]] = {
    "gpt2": {"attention_dropout": ("attn_pdrop", 0.1), "residual_dropout": ("resid_pdrop", 0.1),
             "embedding_dropout": ("embd_pdrop", 0.1)},
    "opt": {"attention_dropout": ("attention_dropout", 0.0), "residual_dropout": ("dropout", 0.1)},
    "gpt_neox": {"attention_dropout": ("attention_dropout", 0.0), "residual_dropout": ("hidden_dropout", 0.0),
                 "embedding_dropout": ("hidden_dropout", 0.0)},
    "phi3": {"attention_dropout": ("attention_dropout", 0.0), "residual_dropout": ("resid_pdrop", 0.0)},
    **{t: {"attention_dropout": ("attention_dropout", 0.0)}
       for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral")},
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Linear:
    """One linear layer inside a decoder block, named by its path in the HF module tree.

    ``path`` is relative to the block (``"self_attn.q_proj"``); PEFT matches a target name
    against the last component (``"q_proj"``). ``experts`` > 1 means one weight per expert
    stored as a fused 3-D parameter (transformers 5 MoE), which PEFT's ``all-linear`` skips.
    """

    path: str
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
    size: int
    bias: bool

    @property
    def numel(self) -> int:
        return self.size * (2 if self.bias else 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelShape:
    """What a training step's memory depends on, for one decoder-only architecture.

    Symbols used across memfit's docstrings: L = ``n_layers``, h = ``hidden``, a = ``n_heads``,
    k = ``n_kv_heads``, d = ``head_dim``, i = ``intermediate``, V = ``vocab``, E = ``n_experts``.
    ``attention_dropout``, ``residual_dropout`` and ``embedding_dropout`` are the training-time dropout
    probabilities (see :data:`DROPOUT_FIELDS`).
    """

    name: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    norm: NormKind
    norm_bias: bool
    norm_eps: float
    mlp: MlpKind
    activation: str
    position: PositionKind
    max_positions: int
    rotary_fraction: float = 1.0
    rope_theta: float | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_window: int | None = None
    n_experts: int = 0
    experts_per_token: int = 0
    fused_qkv: bool = False
    fused_gate_up: bool = False
    parallel_residual: bool = False
    sandwich_norms: bool = False
    embed_proj_dim: int = 0
    final_norm: bool = True
    config_dtype: str | None = None
    attention_dropout: float = 0.0
    residual_dropout: float = 0.0
    embedding_dropout: float = 0.0

    # ---- derived structure -------------------------------------------------------------
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
    def embed_dim(self) -> int:
        """Width of the token embedding (OPT's ``word_embed_proj_dim`` may differ from h)."""
        return self.embed_proj_dim or self.hidden

    def linears(self) -> tuple[Linear, ...]:
        """The linear layers of one decoder block, in forward order, as transformers names them."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        t = self.model_type
        if t == "gpt2":
            return (
                Linear(path="attn.c_attn", in_features=h, out_features=3 * h, bias=True),
                Linear(path="attn.c_proj", in_features=h, out_features=h, bias=True),
                Linear(path="mlp.c_fc", in_features=h, out_features=i, bias=True),
                Linear(path="mlp.c_proj", in_features=i, out_features=h, bias=True),
            )
        if t == "gpt_neox":
            b = self.qkv_bias
            return (
                Linear(path="attention.query_key_value", in_features=h, out_features=3 * h, bias=b),
                Linear(path="attention.dense", in_features=h, out_features=h, bias=b),
                Linear(path="mlp.dense_h_to_4h", in_features=h, out_features=i, bias=True),
                Linear(path="mlp.dense_4h_to_h", in_features=i, out_features=h, bias=True),
            )
        if t == "opt":
            b = self.qkv_bias
            return (
                Linear(path="self_attn.q_proj", in_features=h, out_features=h, bias=b),
                Linear(path="self_attn.k_proj", in_features=h, out_features=h, bias=b),
                Linear(path="self_attn.v_proj", in_features=h, out_features=h, bias=b),
                Linear(path="self_attn.out_proj", in_features=h, out_features=h, bias=b),
                Linear(path="fc1", in_features=h, out_features=i, bias=b),
                Linear(path="fc2", in_features=i, out_features=h, bias=b),
            )
        if t == "phi3":
            return (
                Linear(path="self_attn.qkv_proj", in_features=h, out_features=q + 2 * kv),
                Linear(path="self_attn.o_proj", in_features=q, out_features=h),
                Linear(path="mlp.gate_up_proj", in_features=h, out_features=2 * i),
                Linear(path="mlp.down_proj", in_features=i, out_features=h),
            )
        attn = (
            Linear(path="self_attn.q_proj", in_features=h, out_features=q, bias=self.qkv_bias),
            Linear(path="self_attn.k_proj", in_features=h, out_features=kv, bias=self.qkv_bias),
            Linear(path="self_attn.v_proj", in_features=h, out_features=kv, bias=self.qkv_bias),
            Linear(path="self_attn.o_proj", in_features=q, out_features=h, bias=self.o_bias),
        )
        if self.is_moe:
            e = self.n_experts
            return attn + (
                Linear(path="mlp.gate", in_features=h, out_features=e, is_nn_linear=False),
                Linear(path="mlp.experts.gate_up_proj", in_features=h, out_features=2 * i, experts=e,
                       is_nn_linear=False),
                Linear(path="mlp.experts.down_proj", in_features=i, out_features=h, experts=e,
                       is_nn_linear=False),
            )
        b = self.mlp_bias
        return attn + (
            Linear(path="mlp.gate_proj", in_features=h, out_features=i, bias=b),
            Linear(path="mlp.up_proj", in_features=h, out_features=i, bias=b),
            Linear(path="mlp.down_proj", in_features=i, out_features=h, bias=b),
        )

    def norms(self) -> tuple[Norm, ...]:
        """The normalisation layers of one decoder block, as transformers names them."""
        h, b = self.hidden, self.norm_bias
        t = self.model_type
        if t == "gpt2":
            return (Norm(path="ln_1", size=h, bias=True), Norm(path="ln_2", size=h, bias=True))
        if t == "opt":
            return (
                Norm(path="self_attn_layer_norm", size=h, bias=True),
                Norm(path="final_layer_norm", size=h, bias=True),
            )
        out = [Norm(path="input_layernorm", size=h, bias=b)]
        if self.qk_norm:
            out += [Norm(path="self_attn.q_norm", size=self.head_dim, bias=False),
                    Norm(path="self_attn.k_norm", size=self.head_dim, bias=False)]
        out.append(Norm(path="post_attention_layernorm", size=h, bias=b))
        if self.sandwich_norms:
            out += [Norm(path="pre_feedforward_layernorm", size=h, bias=b),
                    Norm(path="post_feedforward_layernorm", size=h, bias=b)]
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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


# ---- the boundary: reading and validating a config --------------------------------------------------

def read_config_file(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The JSON object in ``path`` (a ``config.json``, or a directory holding one) and the file it came from.

    The one reader of config files for every engine. It refuses, with one MemfitError naming the fix: a
    missing file, a symlink loop, a directory where the file should be, a file over ``MAX_CONFIG_BYTES``
    (checked on the size before reading, and never reading more than the limit plus one byte, so a 2 GB
    file costs nothing), text that is not UTF-8 JSON, JSON nested too deeply for Python's parser, and JSON
    that is not an object.
    """
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        info = p.stat()
    except FileNotFoundError:
        raise MemfitError(f"no config.json at {p}: pass a catalogue name (see `memfit models`), "
                          "a config.json path or a directory holding one") from None
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        raise MemfitError(f"cannot read {p} ({exc.strerror or exc}): pass a config.json file or a "
                          "directory holding one") from None
    if stat.S_ISDIR(info.st_mode):
        raise MemfitError(f"{p} is a directory, not a config file: pass a config.json file or a directory "
                          "holding one")
    too_big = (f"{p} is over {MAX_CONFIG_BYTES:,} B (16 MiB), memfit's limit for a config.json (real ones are "
               "a few kB): pass the model's config.json, not its weights or a data file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise MemfitError(too_big)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # a pipe or /proc file reports size 0: cap the read itself
    except OSError as exc:
        raise MemfitError(f"cannot read {p} ({exc.strerror or exc}): pass a readable config.json") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise MemfitError(too_big)
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, or an integer of over 4,300 digits
        raise MemfitError(f"{p} is not valid JSON ({exc}): fix the file or pass another config") from None
    except RecursionError:
        raise MemfitError(f"{p} nests its JSON deeper than Python's parser allows; a Hugging Face config is "
                          "a flat object: pass the model's config.json") from None
    if not isinstance(config, dict):
        raise MemfitError(f"{p} must hold a JSON object (a Hugging Face config), not {type(config).__name__}")
    return config, p


def validate_config(config: dict[str, Any]) -> None:
    """Check a config dict before any engine uses it; a MemfitError naming the field and the fix.

    Architectures the estimate models are checked by reading their :class:`ModelShape` (every rule of the
    module docstring). Others (``memfit trace`` runs any transformers architecture), and configs that leave
    out a key the estimate needs but transformers defaults (an OPT config without ``ffn_dim``), get the same
    checks on the keys they have: each size a positive integer within ``SIZE_LIMITS``, key/value heads
    dividing the heads, experts per token at most the experts.
    """
    cfg = _language_config(config)
    model_type = cfg.get("model_type")
    if model_type in SUPPORTED_MODEL_TYPES:
        try:
            _parse_config(config, name=None)
            return
        except _MissingKey:  # the estimate needs it; transformers has a default: check the keys present
            pass
    ints = {fact: _optional_int(cfg, fact, *keys) for fact, keys in _GENERIC_KEYS.items()}
    heads, kv = ints["attention heads"], ints["key/value heads"]
    if heads and kv:
        _check_kv_heads(heads, kv, heads_key=_key(cfg, *_GENERIC_KEYS["attention heads"]))
    if ints["experts"] and ints["experts per token"]:
        _check_experts(ints["experts"], ints["experts per token"], experts_key=_key(cfg, *_GENERIC_KEYS["experts"]),
                       per_token_key=_key(cfg, *_GENERIC_KEYS["experts per token"]))


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


def _key(cfg: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` present (not null) in ``cfg``, else the first one."""
    return next((k for k in keys if cfg.get(k) is not None), keys[0])


def _check_int(fact: str, key: str, value: Any) -> int:
    """``value`` as a positive integer within ``SIZE_LIMITS[fact]``, else a MemfitError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise MemfitError(f"config field {key} must be a positive integer, got {value!r}: fix it in "
                          "config.json (the model's card on the Hub has the real value)")
    limit = SIZE_LIMITS[fact]
    if value > limit:
        raise MemfitError(f"config field {key} is {value:,}: memfit accepts {fact} up to {limit:,} (real models "
                          "stay far below it); fix it in config.json")
    return value


def _optional_int(cfg: dict[str, Any], fact: str, *keys: str) -> int | None:
    key = _key(cfg, *keys)
    value = cfg.get(key)
    return None if value is None else _check_int(fact, key, value)


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
    """The config of the language model: ``cfg`` itself, or its ``text_config`` (multimodal configs)."""
    for _ in range(_MAX_TEXT_CONFIG_DEPTH):
        if cfg.get("model_type") or not isinstance(cfg.get("text_config"), dict):
            break
        cfg = cfg["text_config"]
    return cfg


# ---- the reader ------------------------------------------------------------------------------

def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


class _MissingKey(MemfitError):
    """A size the estimate needs is absent from the config (transformers may still have a default for it)."""


class _Reader:
    def __init__(self, cfg: dict[str, Any], model_type: str):
        self.cfg = cfg
        self.model_type = model_type

    def need(self, fact: str, *keys: str) -> int:
        """A required size: a positive integer within ``SIZE_LIMITS[fact]``."""
        value = _first(self.cfg, *keys)
        if value is None:
            raise _MissingKey(
                f"the {self.model_type} config lacks {' / '.join(keys)}: add it to config.json "
                "(copy it from the model's card on the Hub)"
            )
        return _check_int(fact, _key(self.cfg, *keys), value)

    def size(self, fact: str, *keys: str, default: int) -> int:
        """An optional size: ``default`` when absent or null, else checked as :meth:`need` does."""
        value = _first(self.cfg, *keys)
        return default if value is None else _check_int(fact, _key(self.cfg, *keys), value)

    def real(self, *keys: str, default: float) -> float:
        """An optional number (``rms_norm_eps``, ``rotary_pct`` ...): ``default`` when absent or null."""
        value = self.real_or_none(*keys)
        return default if value is None else value

    def real_or_none(self, *keys: str) -> float | None:
        value = _first(self.cfg, *keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MemfitError(f"config field {_key(self.cfg, *keys)} must be a number, got {value!r}: fix it in "
                              "config.json")
        return float(value)

    def get(self, *keys: str, default: Any = None) -> Any:
        return _first(self.cfg, *keys, default=default)


def _rope_theta(cfg: dict[str, Any], model_type: str) -> float | None:
    if cfg.get("rope_theta") is not None:
        return _Reader(cfg, model_type).real_or_none("rope_theta")
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        if "rope_theta" in params:
            return _Reader(params, model_type).real_or_none("rope_theta")
        # per-layer-type layouts (e.g. {"full_attention": {...}, "sliding_attention": {...}})
        for sub in params.values():
            if isinstance(sub, dict) and "rope_theta" in sub:
                return _Reader(sub, model_type).real_or_none("rope_theta")
    return None


def _dropout(cfg: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability from the config (``default`` when the key is absent or null)."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise MemfitError(f"config field {key} must be a dropout probability in [0, 1), got {value!r}: "
                          "fix config.json")
    return float(value)


def _parse_config(config: dict[str, Any], *, name: str | None) -> ModelShape:
    cfg = _language_config(config)
    model_type = cfg.get("model_type")
    if not model_type:
        raise MemfitError("config has no model_type: it must be a Hugging Face config.json "
                          f"(supported model_type: {', '.join(SUPPORTED_MODEL_TYPES)})")
    model_type = str(model_type)
    if model_type not in SUPPORTED_MODEL_TYPES and cfg.get("is_encoder_decoder"):
        raise MemfitError(f"model_type {model_type!r} is an encoder-decoder (sequence-to-sequence) model, "
                          "is_encoder_decoder: true: memfit models decoder-only causal-LM fine-tuning "
                          f"({', '.join(SUPPORTED_MODEL_TYPES)}; trace: any AutoModelForCausalLM); this "
                          "architecture is not supported")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise MemfitError(f"model_type {model_type!r} is not supported yet; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)} (for other architectures, `memfit trace` "
                          "runs the real model code)")
    r = _Reader(cfg, model_type)
    n_layers = r.need("layers", "num_hidden_layers", "n_layer", "num_layers")
    hidden = r.need("hidden size", "hidden_size", "n_embd", "d_model")
    n_heads = r.need("attention heads", "num_attention_heads", "n_head")
    heads_key = _key(cfg, "num_attention_heads", "n_head")
    if hidden % n_heads and model_type in HEADS_DIVIDE_HIDDEN:
        hidden_key = _key(cfg, "hidden_size", "n_embd", "d_model")
        raise MemfitError(f"{hidden_key} {hidden} is not divisible by {heads_key} {n_heads}: transformers' "
                          f"{model_type} splits the hidden size evenly across the heads; set {heads_key} to a "
                          f"divisor of {hidden} ({_divisors(hidden)})")
    if model_type in ("gpt2", "gpt_neox", "opt"):  # multi-head attention; transformers ignores both keys
        n_kv, head_dim = n_heads, hidden // n_heads
    else:
        if "num_key_value_heads" in cfg:  # null: = heads, as the config classes' __post_init__ do
            n_kv = r.size("key/value heads", "num_key_value_heads", default=n_heads)
        else:
            n_kv = KV_HEADS_DEFAULT.get(model_type, n_heads)
        head_dim = r.size("head dimension", "head_dim", default=HEAD_DIM_DEFAULT.get(model_type, hidden // n_heads))
        if head_dim < 1:
            raise MemfitError(f"{heads_key} {n_heads} is more than the hidden size {hidden}: every head needs at "
                              "least one dimension; fix it in config.json (or give head_dim)")
    _check_kv_heads(n_heads, n_kv, heads_key=heads_key)
    vocab = r.need("vocabulary", "vocab_size")
    act = str(r.get("hidden_activation", "hidden_act", "activation_function", default="silu"))
    dtype = r.get("dtype", "torch_dtype")
    dropout = {field: _dropout(cfg, key, default) for field, (key, default) in DROPOUT_FIELDS[model_type].items()}
    common: dict[str, Any] = {
        **dropout,
        "name": name or str(r.get("_name_or_path", default=model_type)) or model_type,
        "model_type": model_type,
        "n_layers": n_layers,
        "hidden": hidden,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "head_dim": head_dim,
        "vocab": vocab,
        "activation": act,
        "rope_theta": _rope_theta(cfg, model_type),
        "config_dtype": str(dtype) if dtype is not None else None,
    }
    if model_type == "gpt2":
        return ModelShape(
            **common,
            intermediate=r.size("intermediate size", "n_inner", default=4 * hidden),
            tie_embeddings=bool(r.get("tie_word_embeddings", default=True)),
            norm="layernorm", norm_bias=True, norm_eps=r.real("layer_norm_epsilon", default=1e-5),
            mlp="plain", position="learned",
            max_positions=r.need("positions", "n_positions", "max_position_embeddings"),
            qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        )
    if model_type == "gpt_neox":
        return ModelShape(
            **common,
            intermediate=r.need("intermediate size", "intermediate_size"),
            tie_embeddings=bool(r.get("tie_word_embeddings", default=False)),
            norm="layernorm", norm_bias=True, norm_eps=r.real("layer_norm_eps", default=1e-5),
            mlp="plain", position="rotary", max_positions=r.size("positions", "max_position_embeddings", default=2048),
            rotary_fraction=r.real("rotary_pct", "partial_rotary_factor", default=0.25),
            qkv_bias=bool(r.get("attention_bias", default=True)), o_bias=bool(r.get("attention_bias", default=True)),
            mlp_bias=True, fused_qkv=True, parallel_residual=bool(r.get("use_parallel_residual", default=True)),
        )
    if model_type == "opt":
        proj = r.size("hidden size", "word_embed_proj_dim", default=hidden)
        before = bool(r.get("do_layer_norm_before", default=True))
        return ModelShape(
            **common,
            intermediate=r.need("intermediate size", "ffn_dim"),
            tie_embeddings=bool(r.get("tie_word_embeddings", default=True)),
            norm="layernorm", norm_bias=True, norm_eps=1e-5,
            mlp="plain", position="learned", max_positions=r.need("positions", "max_position_embeddings"),
            qkv_bias=bool(r.get("enable_bias", default=True)), o_bias=bool(r.get("enable_bias", default=True)),
            mlp_bias=bool(r.get("enable_bias", default=True)),
            embed_proj_dim=proj if proj != hidden else 0,
            final_norm=before and not bool(r.get("_remove_final_layer_norm", default=False)),
        )
    # rotary, RMSNorm, gated-MLP families
    gemma = model_type in ("gemma", "gemma2")
    sliding = 0
    if model_type in ("gemma2", "mistral", "mixtral") or (
            model_type in ("qwen2", "qwen3") and r.get("use_sliding_window", default=False)):
        sliding = r.size("positions", "sliding_window", default=0)
    n_experts = per_token = 0
    if model_type == "mixtral":
        n_experts = r.size("experts", "num_local_experts", default=MIXTRAL_EXPERTS_DEFAULT[0])
        per_token = r.size("experts per token", "num_experts_per_tok", default=MIXTRAL_EXPERTS_DEFAULT[1])
        _check_experts(n_experts, per_token, experts_key="num_local_experts", per_token_key="num_experts_per_tok")
    return ModelShape(
        **common,
        intermediate=r.need("intermediate size", "intermediate_size"),
        tie_embeddings=bool(r.get("tie_word_embeddings", default=gemma)),
        norm="rmsnorm", norm_bias=False, norm_eps=r.real("rms_norm_eps", default=1e-6),
        mlp="gated", position="rotary", max_positions=r.size("positions", "max_position_embeddings", default=4096),
        rotary_fraction=r.real("partial_rotary_factor", default=1.0),
        # Qwen2 hard-codes bias on q/k/v and none on o_proj; the others follow attention_bias.
        qkv_bias=model_type == "qwen2" or bool(r.get("attention_bias", default=False)),
        o_bias=model_type != "qwen2" and bool(r.get("attention_bias", default=False)),
        mlp_bias=bool(r.get("mlp_bias", default=False)),
        qk_norm=model_type == "qwen3",
        attn_softcap=r.real_or_none("attn_logit_softcapping") if model_type == "gemma2" else None,
        final_softcap=r.real_or_none("final_logit_softcapping") if model_type == "gemma2" else None,
        sliding_window=sliding or None,
        n_experts=n_experts,
        experts_per_token=per_token,
        fused_qkv=model_type == "phi3",
        fused_gate_up=model_type == "phi3",
        sandwich_norms=model_type == "gemma2",
    )
