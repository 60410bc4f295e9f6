"""The config reads behind :class:`~memfit.estimate.shape.ModelShape` that need more than one key: the key/value
heads and head_dim, each layer's attention type, the experts, the rope base; and the checks
:func:`~memfit.estimate.shape.validate_config` shares with them (a MemfitError naming the field and the fix)."""

from __future__ import annotations

from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.arch import Architecture, ConfigKeys, ConfigReader, LayerType
from memfit.estimate.arch.keys import first_key


def divisors(n: int) -> str:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return ", ".join(str(d) for d in sorted(set(small + [n // d for d in small])))


def check_kv_heads(heads: int, kv: int, *, heads_key: str) -> None:
    if heads % kv:
        more = f"more key/value heads than the {heads} heads; " if kv > heads else ""
        raise MemfitError(f"num_key_value_heads {kv} does not divide {heads_key} {heads} ({more}grouped-query "
                          f"attention shares each key/value head among {heads_key} / num_key_value_heads query "
                          f"heads): set num_key_value_heads to one of {divisors(heads)}")


def check_experts(experts: int, per_token: int, *, experts_key: str, per_token_key: str) -> None:
    if per_token > experts:
        raise MemfitError(f"{per_token_key} {per_token} is more than the {experts} experts ({experts_key}): each "
                          f"token picks {per_token_key} of them; set it to at most {experts}")


def rope_theta(cfg: dict[str, Any], model_type: str) -> float | None:
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


def read_heads(r: ConfigReader, k: ConfigKeys, hidden: int, n_heads: int) -> tuple[int, int]:
    """Key/value heads and head_dim, checked: (k, d)."""
    cfg, model_type = r.cfg, r.model_type
    heads_key = first_key(cfg, *k.heads)
    if hidden % n_heads and k.heads_divide_hidden:
        hidden_key = first_key(cfg, *k.hidden)
        raise MemfitError(f"{hidden_key} {hidden} is not divisible by {heads_key} {n_heads}: transformers' "
                          f"{model_type} splits the hidden size evenly across the heads; set {heads_key} to a "
                          f"divisor of {hidden} ({divisors(hidden)})")
    if k.multi_query.read(r):  # Falcon's multi_query: one key/value head, d = h / a
        n_kv, head_dim = 1, hidden // n_heads
    elif not k.kv_heads:  # multi-head attention; transformers ignores both keys
        n_kv, head_dim = n_heads, hidden // n_heads
        if k.kv_heads_equal:  # DeepSeek's MLA: the key must equal the heads (its class default otherwise)
            given = r.size("key/value heads", k.kv_heads_equal, default=k.kv_heads_default or n_heads)
            if given != n_heads:
                raise MemfitError(f"{k.kv_heads_equal} is {given} (the {model_type} default when absent: "
                                  f"{k.kv_heads_default}) but multi-head latent attention expands its latent to "
                                  f"every head: set {k.kv_heads_equal} to {heads_key} ({n_heads})")
    else:
        if k.kv_heads[0] in cfg:  # null: = heads, as the config classes' __post_init__ do
            n_kv = r.size("key/value heads", *k.kv_heads, default=n_heads)
        else:
            n_kv = k.kv_heads_default or n_heads
        head_dim = r.size("head dimension", "head_dim", default=k.head_dim_default or hidden // n_heads)
        if head_dim < 1:
            raise MemfitError(f"{heads_key} {n_heads} is more than the hidden size {hidden}: every head needs at "
                              "least one dimension; fix it in config.json (or give head_dim)")
    check_kv_heads(n_heads, n_kv, heads_key=heads_key)
    return n_kv, head_dim


def read_layer_types(r: ConfigReader, arch: Architecture, n_layers: int, window: int | None) -> tuple[LayerType, ...]:
    """Each layer's attention: ``sliding`` where the window applies (the layout's rule, or the config's own
    ``layer_types`` list), else ``full``."""
    rule = arch.layout.sliding_layers
    if window is None or rule == "none":
        return (layer_type(False),) * n_layers
    listed = r.get(*arch.keys.layer_types) if arch.keys.layer_types else None
    if listed is not None:
        if not isinstance(listed, list) or len(listed) != n_layers or any(
                t not in ("full_attention", "sliding_attention") for t in listed):
            raise MemfitError(f"config field layer_types must list {n_layers} entries, each full_attention or "
                              f"sliding_attention (one per layer), got {listed!r}: fix it in config.json")
        return tuple(layer_type(t == "sliding_attention") for t in listed)
    first_sliding = arch.keys.max_window_layers.read(r) if rule == "after_max_window_layers" else 0
    period = arch.keys.sliding_pattern.read(r) if rule == "pattern" else 1
    sliding = [rule == "all" or (rule == "alternate" and i % 2 == 0)
               or (rule == "after_max_window_layers" and i >= first_sliding)
               or (rule == "pattern" and (i + 1) % period != 0) for i in range(n_layers)]
    return tuple(layer_type(s) for s in sliding)


def layer_type(sliding: bool) -> LayerType:
    return "sliding" if sliding else "full"


def read_experts(r: ConfigReader, k: ConfigKeys) -> tuple[int, int]:
    if k.experts is None or k.experts_per_token is None:
        return 0, 0
    n_experts, per_token = k.experts.read(r), k.experts_per_token.read(r)
    check_experts(n_experts, per_token, experts_key=k.experts.names[0], per_token_key=k.experts_per_token.names[0])
    if k.expert_groups:  # DeepseekV3TopkRouter: n_group groups of >= 2 experts (topk(2) each), topk_group picked
        (group_key, group_default), (pick_key, pick_default) = k.expert_groups
        groups = r.size("experts", group_key, default=group_default)
        picked = r.size("experts", pick_key, default=pick_default)
        if n_experts % groups or n_experts // groups < 2 or picked > groups:
            raise MemfitError(f"{group_key} {groups} and {pick_key} {picked} do not fit {n_experts} experts: the "
                              f"router splits them into {group_key} groups of at least 2 and picks {pick_key} <= "
                              f"{group_key} groups; set {group_key} to a divisor of {n_experts} "
                              f"({divisors(n_experts)}) at most {n_experts // 2}, and {pick_key} to at most it")
    return n_experts, per_token
