"""The module names transformers 5.24 gives an architecture: what PEFT matches ``--targets`` and
``--modules-to-save`` against, and what ``named_modules()`` lists (a test compares them on the meta device).

Defaults are Llama's (``transformers/models/llama/modeling_llama.py``); an entry overrides what differs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockNames:
    """Paths inside one decoder block. Only the roles the layout uses are read (``qkv`` with ``fused_qkv``,
    ``gate_up`` with ``fused_gate_up``, the norms whose slot exists, the router and experts with MoE)."""

    q: str = "self_attn.q_proj"
    k: str = "self_attn.k_proj"
    v: str = "self_attn.v_proj"
    qkv: str = "self_attn.qkv_proj"
    o: str = "self_attn.o_proj"
    q_norm: str = "self_attn.q_norm"
    k_norm: str = "self_attn.k_norm"
    gate: str = "mlp.gate_proj"
    up: str = "mlp.up_proj"
    gate_up: str = "mlp.gate_up_proj"
    down: str = "mlp.down_proj"
    router: str = "mlp.gate"
    experts_gate_up: str = "mlp.experts.gate_up_proj"
    experts_down: str = "mlp.experts.down_proj"
    pre_attn_norm: str = "input_layernorm"
    post_attn_norm: str = "post_attention_layernorm"
    pre_mlp_norm: str = "post_attention_layernorm"
    post_mlp_norm: str = "post_feedforward_layernorm"
    sinks: str = "self_attn.sinks"  # a parameter of the attention (attention_sinks)
    extras: tuple[str, ...] = ("mlp.act_fn",)  # parameter-free submodules: activations, dropouts
    # multi-head latent attention (BlockLayout.latent_attention) and MoE shared experts (MoeLayout.shared_experts)
    q_a: str = "self_attn.q_a_proj"
    q_b: str = "self_attn.q_b_proj"
    kv_a: str = "self_attn.kv_a_proj_with_mqa"
    kv_b: str = "self_attn.kv_b_proj"
    q_a_norm: str = "self_attn.q_a_layernorm"
    kv_a_norm: str = "self_attn.kv_a_layernorm"
    shared_gate: str = "mlp.shared_experts.gate_proj"
    shared_up: str = "mlp.shared_experts.up_proj"
    shared_down: str = "mlp.shared_experts.down_proj"
    dense_extras: tuple[str, ...] = ("mlp.act_fn",)  # a MoE model's dense-MLP layers' parameter-free submodules


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelNames:
    """Paths outside the blocks. ``outside`` lists every module outside the decoder blocks in
    ``named_modules()`` order; ``final_norm`` and ``projections`` among them are left out when the config
    has none (OPT's ``do_layer_norm_before: false``; ``word_embed_proj_dim`` equal to the hidden size)."""

    layers: str = "model.layers"
    embed: str = "model.embed_tokens"
    head: str = "lm_head"
    final_norm: str = "model.norm"
    projections: tuple[str, ...] = ()
    outside: tuple[str, ...] = ("model", "model.embed_tokens", "model.layers", "model.norm", "model.rotary_emb",
                                "lm_head")

    @property
    def layers_container(self) -> str:
        """The last name of the block list (``layers`` in ``model.layers.3.mlp``, ``h`` in ``transformer.h.3``)."""
        return self.layers.rsplit(".", 1)[-1]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleNames:
    block: BlockNames = BlockNames()
    model: ModelNames = ModelNames()
