"""ModelShape: the facts about a decoder-only transformer that memory depends on, read from a
Hugging Face ``config.json`` without importing torch.

Real configs come in several generations and dialects. The reader accepts all of them:

=====================  ==========================================================================
fact                   keys read (first present wins)
=====================  ==========================================================================
layers                 num_hidden_layers, n_layer, num_layers
hidden                 hidden_size, n_embd, d_model
heads                  num_attention_heads, n_head
kv heads               num_key_value_heads (default: heads)
head_dim               head_dim (default: hidden // heads)
intermediate           intermediate_size, ffn_dim, n_inner (default 4*hidden for gpt2)
vocab                  vocab_size
rotary base            rope_theta, rope_parameters.rope_theta, rope_scaling (v4 and v5 layouts)
activation             hidden_activation, hidden_act, activation_function
tied embeddings        tie_word_embeddings (per-architecture default as transformers has it)
dropout                :data:`DROPOUT_FIELDS` (per architecture, with the config class's default)
=====================  ==========================================================================
"""

from __future__ import annotations

import json
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
        """Read a Hugging Face config dict (the content of ``config.json``)."""
        return _parse_config(config, name=name)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelShape:
        """Read ``config.json`` from a file, or from a directory that holds one."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise MemfitError(f"no config.json at {p}: pass a catalogue name (see `memfit models`), "
                              "a config.json path or a directory holding one")
        try:
            config = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise MemfitError(f"{p} is not valid JSON ({exc}): fix the file or pass another config") from exc
        if not isinstance(config, dict):
            raise MemfitError(f"{p} must hold a JSON object (a Hugging Face config), not {type(config).__name__}")
        return _parse_config(config, name=p.parent.name if p.name == "config.json" else p.stem)


# ---- the reader ------------------------------------------------------------------------------

def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


class _Reader:
    def __init__(self, cfg: dict[str, Any], model_type: str):
        self.cfg = cfg
        self.model_type = model_type

    def need(self, *keys: str, kind: type = int) -> Any:
        value = _first(self.cfg, *keys)
        if value is None:
            raise MemfitError(
                f"the {self.model_type} config lacks {' / '.join(keys)}: add it to config.json "
                "(copy it from the model's card on the Hub)"
            )
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise MemfitError(f"config field {keys[0]} must be a positive integer, got {value!r}")
        return value

    def get(self, *keys: str, default: Any = None) -> Any:
        return _first(self.cfg, *keys, default=default)


def _rope_theta(cfg: dict[str, Any]) -> float | None:
    if "rope_theta" in cfg and cfg["rope_theta"] is not None:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        if "rope_theta" in params:
            return float(params["rope_theta"])
        # per-layer-type layouts (e.g. {"full_attention": {...}, "sliding_attention": {...}})
        for sub in params.values():
            if isinstance(sub, dict) and "rope_theta" in sub:
                return float(sub["rope_theta"])
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


def _parse_config(cfg: dict[str, Any], *, name: str | None) -> ModelShape:
    model_type = cfg.get("model_type")
    if not model_type:
        if isinstance(cfg.get("text_config"), dict):
            return _parse_config(cfg["text_config"], name=name)
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
    n_layers = r.need("num_hidden_layers", "n_layer", "num_layers")
    hidden = r.need("hidden_size", "n_embd", "d_model")
    n_heads = r.need("num_attention_heads", "n_head")
    if hidden % n_heads and model_type in ("gpt2", "gpt_neox", "opt"):
        raise MemfitError(f"hidden size {hidden} is not divisible by {n_heads} heads")
    n_kv = r.get("num_key_value_heads", default=n_heads)
    head_dim = r.get("head_dim") or hidden // n_heads
    vocab = r.need("vocab_size")
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
        "n_kv_heads": int(n_kv),
        "head_dim": int(head_dim),
        "vocab": vocab,
        "activation": act,
        "rope_theta": _rope_theta(cfg),
        "config_dtype": str(dtype) if dtype is not None else None,
    }
    if model_type == "gpt2":
        n_inner = r.get("n_inner")
        return ModelShape(
            **common,
            intermediate=int(n_inner) if n_inner else 4 * hidden,
            tie_embeddings=bool(r.get("tie_word_embeddings", default=True)),
            norm="layernorm", norm_bias=True, norm_eps=float(r.get("layer_norm_epsilon", default=1e-5)),
            mlp="plain", position="learned", max_positions=r.need("n_positions", "max_position_embeddings"),
            qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        )
    if model_type == "gpt_neox":
        return ModelShape(
            **common,
            intermediate=r.need("intermediate_size"),
            tie_embeddings=bool(r.get("tie_word_embeddings", default=False)),
            norm="layernorm", norm_bias=True, norm_eps=float(r.get("layer_norm_eps", default=1e-5)),
            mlp="plain", position="rotary", max_positions=int(r.get("max_position_embeddings", default=2048)),
            rotary_fraction=float(r.get("rotary_pct", "partial_rotary_factor", default=0.25)),
            qkv_bias=bool(r.get("attention_bias", default=True)), o_bias=bool(r.get("attention_bias", default=True)),
            mlp_bias=True, fused_qkv=True, parallel_residual=bool(r.get("use_parallel_residual", default=True)),
        )
    if model_type == "opt":
        proj = int(r.get("word_embed_proj_dim", default=hidden))
        before = bool(r.get("do_layer_norm_before", default=True))
        return ModelShape(
            **common,
            intermediate=r.need("ffn_dim"),
            tie_embeddings=bool(r.get("tie_word_embeddings", default=True)),
            norm="layernorm", norm_bias=True, norm_eps=1e-5,
            mlp="plain", position="learned", max_positions=r.need("max_position_embeddings"),
            qkv_bias=bool(r.get("enable_bias", default=True)), o_bias=bool(r.get("enable_bias", default=True)),
            mlp_bias=bool(r.get("enable_bias", default=True)),
            embed_proj_dim=proj if proj != hidden else 0,
            final_norm=before and not bool(r.get("_remove_final_layer_norm", default=False)),
        )
    # rotary, RMSNorm, gated-MLP families
    gemma = model_type in ("gemma", "gemma2")
    sliding = r.get("sliding_window") if model_type in ("gemma2", "mistral", "mixtral", "qwen2", "qwen3") else None
    if model_type in ("qwen2", "qwen3") and not r.get("use_sliding_window", default=False):
        sliding = None
    return ModelShape(
        **common,
        intermediate=r.need("intermediate_size"),
        tie_embeddings=bool(r.get("tie_word_embeddings", default=gemma)),
        norm="rmsnorm", norm_bias=False, norm_eps=float(r.get("rms_norm_eps", default=1e-6)),
        mlp="gated", position="rotary", max_positions=int(r.get("max_position_embeddings", default=4096)),
        rotary_fraction=float(r.get("partial_rotary_factor", default=1.0)),
        # Qwen2 hard-codes bias on q/k/v and none on o_proj; the others follow attention_bias.
        qkv_bias=model_type == "qwen2" or bool(r.get("attention_bias", default=False)),
        o_bias=model_type != "qwen2" and bool(r.get("attention_bias", default=False)),
        mlp_bias=bool(r.get("mlp_bias", default=False)),
        qk_norm=model_type == "qwen3",
        attn_softcap=r.get("attn_logit_softcapping") if model_type == "gemma2" else None,
        final_softcap=r.get("final_logit_softcapping") if model_type == "gemma2" else None,
        sliding_window=int(sliding) if sliding else None,
        n_experts=int(r.get("num_local_experts", default=0)) if model_type == "mixtral" else 0,
        experts_per_token=int(r.get("num_experts_per_tok", default=0)) if model_type == "mixtral" else 0,
        fused_qkv=model_type == "phi3",
        fused_gate_up=model_type == "phi3",
        sandwich_norms=model_type == "gemma2",
    )
