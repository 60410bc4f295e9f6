"""The architectures memfit models, one entry each: ``REGISTRY[model_type]``.

Every fact below was read in transformers 5.24.0 (the ``source`` modeling file and its configuration file)
and PEFT 0.21.2; ``tests/estimate/test_architectures.py`` checks each entry against them on the meta device
(parameter counts, LoRA counts, module names, config defaults, attention kernels, PEFT's targets).

Adding an architecture whose block is a combination of known flags is one entry here plus one catalogue
config (README, "Adding an architecture"). How the next ones map onto the flags (each adds at most one):

=============  ============================================================================================
model_type     flags (new ones in *italics*)
=============  ============================================================================================
olmo2          ``pre_attn_norm=False, pre_mlp_norm=False, post_attn_norm=True, post_mlp_norm=True,
               qk_norm="full", norm_weight="before_cast"``: all existing (registered below, issue 13)
phi            ``norm="layernorm", norm_bias=True, parallel_residual=Flag((), True), pre_mlp_norm=False,
               mlp="plain"``, ``partial_rotary_factor`` key, biases ``Flag((), True)``; *head_bias*,
               *qk_norm_enabled* (``qk_layernorm``) (registered below, issue 13)
falcon         registered: ``fused_qkv`` (``self_attention.query_key_value``), ``parallel_residual`` from
               ``parallel_attn``, ``mlp="plain"``, LayerNorm; *multi_query* (a key), *multi_query_kv_copies*,
               *pre_mlp_norm_serial_only*, *parallel_dropout_on_sum*, *sdpa_direct* (its own attention code:
               math-path sdpa), *bias_add_promotes*; ``new_decoder_architecture`` and ``alibi`` refused
               (``not_modelled``)
granite        Llama's layout; *scalar_multipliers* (embedding, residual, logits: each a new tensor that saves
               nothing) (registered below, issue 13)
gemma3_text    Gemma 2's layout + ``qk_norm="head"`` (with the Gemma offset) + ``layer_types``;
               *sliding_layers="pattern"* (``sliding_window_pattern``), *rope_per_layer_type* (two cos/sin
               pairs) (registered below, issue 13)
qwen3_moe      registered: Qwen3's attention + ``MoeLayout(weights_in_logits_dtype=True)``, *router_renorm* (a key:
               ``norm_topk_prob``); dense layers (``mlp_only_layers``, ``decoder_sparse_step``): *dense_layers* (a
               per-layer MLP kind: ``ModelShape.layer_shape``, replayed once per kind)
gpt_oss        registered: ``norm_weight="before_cast"``, ``sliding_layers`` from ``layer_types``; *attention_sinks*
               (a (a,) parameter: ``ModelShape.block_params``; a concatenated column in eager),
               *rotary_half_tables*; ``MoeLayout(router="topk_softmax", bias=True, gate="clamped_swiglu")``;
               *all_linear_moe=False* (PEFT's all-linear leaves its experts alone)
deepseek_v3    registered: *latent_attention* (q_a/q_b or q_proj, kv_a/kv_b projections and their norms; sizes in
               ``ConfigKeys.latent``), ``MoeLayout(router="sigmoid_group_topk", shared_experts=True)``, *dense_layers*
               ``first_k``, *peft_expert_names* (PEFT's qwen2_moe conversion of gate/up/down_proj)
=============  ============================================================================================
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.arch.architecture import Architecture
from memfit.estimate.arch.keys import Cap, ConfigKeys, DenseLayers, Dropout, Flag, LatentKeys, Real, Size, Text, Window
from memfit.estimate.arch.layout import BlockLayout, MoeLayout
from memfit.estimate.arch.names import BlockNames, ModelNames, ModuleNames

_SOURCE = "transformers/models/{0}/modeling_{0}.py (transformers 5.24.0)"
_NO_BIAS = Flag((), False)  # the projections' bias is fixed in the modeling code, not read from the config
_QV = ("q_proj", "v_proj")
_QWEN2_MOE_EXPERTS = ("gate_proj", "up_proj", "down_proj")  # PEFT's names for the fused experts (Architecture)


def _qwen_keys(**kw: Any) -> ConfigKeys:
    """Qwen2/3: ``sliding_window`` applies only with ``use_sliding_window``, and then from layer
    ``max_window_layers`` on (``Qwen2Config.__post_init__``)."""
    return ConfigKeys(kv_heads_default=32, positions=Size("positions", ("max_position_embeddings",), 32768),
                      sliding_window=Window(("sliding_window",), 4096),
                      sliding_enabled=Flag(("use_sliding_window",), False),
                      max_window_layers=Size("layers", ("max_window_layers",), 28), layer_types=("layer_types",), **kw)


def _layernorm(**kw: Any) -> BlockLayout:
    """GPT-2, GPT-NeoX, OPT: LayerNorm with bias, a plain MLP, multi-head attention (no repeat_kv)."""
    return BlockLayout(norm="layernorm", norm_bias=True, mlp="plain", eager_repeat_kv=False, **kw)

LLAMA = Architecture(
    model_type="llama", source=_SOURCE.format("llama"), layout=BlockLayout(),
    keys=ConfigKeys(heads_divide_hidden=True, mlp_bias=Flag(("mlp_bias",), False)),
    names=ModuleNames(), lora_targets=_QV,
)

MISTRAL = Architecture(
    model_type="mistral", source=_SOURCE.format("mistral"), layout=BlockLayout(sliding_layers="all"),
    keys=ConfigKeys(kv_heads_default=8, positions=Size("positions", ("max_position_embeddings",), 4096 * 32),
                    sliding_window=Window(("sliding_window",), 4096), qkv_bias=_NO_BIAS, o_bias=_NO_BIAS),
    names=ModuleNames(), lora_targets=_QV,
)

QWEN2 = Architecture(
    model_type="qwen2", source=_SOURCE.format("qwen2"), layout=BlockLayout(sliding_layers="after_max_window_layers"),
    keys=_qwen_keys(qkv_bias=Flag((), True), o_bias=_NO_BIAS),
    names=ModuleNames(), lora_targets=_QV,
)

QWEN3 = Architecture(
    model_type="qwen3", source=_SOURCE.format("qwen3"),
    layout=BlockLayout(qk_norm="head", sliding_layers="after_max_window_layers"),
    keys=_qwen_keys(head_dim_default=128),
    names=ModuleNames(), lora_targets=_QV,
)

GEMMA = Architecture(
    model_type="gemma", source=_SOURCE.format("gemma"),
    layout=BlockLayout(norm_weight="one_plus_before_cast", embed_scale=True),
    keys=ConfigKeys(kv_heads_default=16, head_dim_default=256,
                    positions=Size("positions", ("max_position_embeddings",), 8192),
                    activation=Text(("hidden_act", "hidden_activation", "activation_function"), "gelu_pytorch_tanh"),
                    tie_embeddings=Flag(("tie_word_embeddings",), True)),
    names=ModuleNames(), lora_targets=_QV,
)

GEMMA2 = Architecture(
    model_type="gemma2", source=_SOURCE.format("gemma2"),
    layout=BlockLayout(norm_weight="one_plus_before_cast", embed_scale=True, post_attn_norm=True, post_mlp_norm=True,
                       sliding_layers="alternate"),
    keys=ConfigKeys(kv_heads_default=4, head_dim_default=256, heads_divide_hidden=True,
                    positions=Size("positions", ("max_position_embeddings",), 8192),
                    activation=Text(("hidden_activation", "hidden_act", "activation_function"), "gelu_pytorch_tanh"),
                    tie_embeddings=Flag(("tie_word_embeddings",), True),
                    attn_softcap=Cap(("attn_logit_softcapping",), 50.0),
                    final_softcap=Cap(("final_logit_softcapping",), 30.0),
                    sliding_window=Window(("sliding_window",), 4096), layer_types=("layer_types",),
                    scales_with_head_dim=("query_pre_attn_scalar",)),
    names=ModuleNames(block=BlockNames(pre_mlp_norm="pre_feedforward_layernorm")), lora_targets=_QV,
    attention_kernels=("eager", "flash"), kernel_note="its attention soft-capping needs the scores",
)

PHI3 = Architecture(
    model_type="phi3", source=_SOURCE.format("phi3"),
    layout=BlockLayout(fused_qkv=True, fused_gate_up=True, sliding_layers="all"),
    keys=ConfigKeys(positions=Size("positions", ("max_position_embeddings",), 4096),
                    norm_eps=Real(("rms_norm_eps",), 1e-5),
                    sliding_window=Window(("sliding_window",), None), residual_dropout=Dropout("resid_pdrop", 0.0),
                    qkv_bias=_NO_BIAS, o_bias=_NO_BIAS),
    names=ModuleNames(block=BlockNames(extras=("mlp.activation_fn", "resid_attn_dropout", "resid_mlp_dropout"))),
    lora_targets=None, lora_hint="qkv_proj,o_proj",
)

MIXTRAL = Architecture(
    model_type="mixtral", source=_SOURCE.format("mixtral"), layout=BlockLayout(moe=MoeLayout(), sliding_layers="all"),
    keys=ConfigKeys(kv_heads_default=8, positions=Size("positions", ("max_position_embeddings",), 4096 * 32),
                    norm_eps=Real(("rms_norm_eps",), 1e-5), sliding_window=Window(("sliding_window",), None),
                    experts=Size("experts", ("num_local_experts",), 8),
                    experts_per_token=Size("experts per token", ("num_experts_per_tok",), 2),
                    qkv_bias=_NO_BIAS, o_bias=_NO_BIAS),
    names=ModuleNames(block=BlockNames(extras=("mlp.experts.act_fn",))), lora_targets=_QV,
    peft_expert_names=("w1", "w3", "w2"),  # PEFT 0.21.2's mixtral conversion: w1, w3 -> gate_up_proj, w2 -> down_proj
)

GPT2 = Architecture(
    model_type="gpt2", source=_SOURCE.format("gpt2"),
    layout=_layernorm(fused_qkv=True, position="learned", eager_softmax_dtype="input", eager_qkv_copies=True),
    keys=ConfigKeys(layers=("n_layer", "num_hidden_layers", "num_layers"), hidden=("n_embd", "hidden_size", "d_model"),
                    heads=("n_head", "num_attention_heads"), kv_heads=(), heads_divide_hidden=True,
                    intermediate=Size("intermediate size", ("n_inner",), per_hidden=4),
                    positions=Size("positions", ("n_positions", "max_position_embeddings")),
                    activation=Text(("activation_function", "hidden_act", "hidden_activation"), "gelu_new"),
                    norm_eps=Real(("layer_norm_epsilon",), 1e-5), tie_embeddings=Flag(("tie_word_embeddings",), True),
                    rotary_fraction=Real((), 1.0), qkv_bias=Flag((), True), o_bias=Flag((), True),
                    mlp_bias=Flag((), True), attention_dropout=Dropout("attn_pdrop", 0.1),
                    residual_dropout=Dropout("resid_pdrop", 0.1), embedding_dropout=Dropout("embd_pdrop", 0.1)),
    names=ModuleNames(
        block=BlockNames(qkv="attn.c_attn", o="attn.c_proj", up="mlp.c_fc", down="mlp.c_proj", pre_attn_norm="ln_1",
                         pre_mlp_norm="ln_2",
                         extras=("attn.attn_dropout", "attn.resid_dropout", "mlp.act", "mlp.dropout")),
        model=ModelNames(layers="transformer.h", embed="transformer.wte", final_norm="transformer.ln_f",
                         outside=("transformer", "transformer.wte", "transformer.wpe", "transformer.drop",
                                  "transformer.h", "transformer.ln_f", "lm_head"))),
    lora_targets=("c_attn",),
)

GPT_NEOX = Architecture(
    model_type="gpt_neox", source=_SOURCE.format("gpt_neox"),
    layout=_layernorm(fused_qkv=True),
    keys=ConfigKeys(kv_heads=(), heads_divide_hidden=True,
                    activation=Text(("hidden_act", "hidden_activation", "activation_function"), "gelu"),
                    norm_eps=Real(("layer_norm_eps",), 1e-5),
                    rotary_fraction=Real(("rotary_pct", "partial_rotary_factor"), 0.25),
                    qkv_bias=Flag(("attention_bias",), True), o_bias=Flag(("attention_bias",), True),
                    mlp_bias=Flag((), True), parallel_residual=Flag(("use_parallel_residual",), True),
                    residual_dropout=Dropout("hidden_dropout", 0.0), embedding_dropout=Dropout("hidden_dropout", 0.0)),
    names=ModuleNames(
        block=BlockNames(qkv="attention.query_key_value", o="attention.dense", up="mlp.dense_h_to_4h",
                         down="mlp.dense_4h_to_h", extras=("post_attention_dropout", "post_mlp_dropout", "mlp.act")),
        model=ModelNames(layers="gpt_neox.layers", embed="gpt_neox.embed_in", final_norm="gpt_neox.final_layer_norm",
                         outside=("gpt_neox", "gpt_neox.embed_in", "gpt_neox.emb_dropout", "gpt_neox.layers",
                                  "gpt_neox.final_layer_norm", "gpt_neox.rotary_emb", "lm_head"))),
    lora_targets=("query_key_value",),
)

_OPT_BIAS = Flag(("enable_bias",), True)
OPT = Architecture(
    model_type="opt", source=_SOURCE.format("opt"),
    layout=_layernorm(scale_query=True, position="learned", position_offset=2, position_ids_per_row=True),
    keys=ConfigKeys(kv_heads=(), heads_divide_hidden=True, intermediate=Size("intermediate size", ("ffn_dim",)),
                    positions=Size("positions", ("max_position_embeddings",)),
                    activation=Text(("activation_function", "hidden_act", "hidden_activation"), "relu"),
                    norm_eps=Real((), 1e-5), tie_embeddings=Flag(("tie_word_embeddings",), True),
                    rotary_fraction=Real((), 1.0), qkv_bias=_OPT_BIAS, o_bias=_OPT_BIAS, mlp_bias=_OPT_BIAS,
                    embed_proj_dim=("word_embed_proj_dim",), final_norm=Flag(("do_layer_norm_before",), True),
                    final_norm_dropped=Flag(("_remove_final_layer_norm",), False),
                    residual_dropout=Dropout("dropout", 0.1)),
    names=ModuleNames(
        block=BlockNames(o="self_attn.out_proj", up="fc1", down="fc2", pre_attn_norm="self_attn_layer_norm",
                         pre_mlp_norm="final_layer_norm", extras=("activation_fn",)),
        model=ModelNames(layers="model.decoder.layers", embed="model.decoder.embed_tokens",
                         final_norm="model.decoder.final_layer_norm",
                         projections=("model.decoder.project_out", "model.decoder.project_in"),
                         outside=("model", "model.decoder", "model.decoder.embed_tokens",
                                  "model.decoder.embed_positions", "model.decoder.layers", "lm_head",
                                  "model.decoder.project_out",
                                  "model.decoder.project_in", "model.decoder.final_layer_norm"))),
    lora_targets=_QV,
)

# ---- issue 13: OLMo 2, Phi, Granite, Gemma 3 -----------------------------------------------------------------

# OLMo 2: Llama's block with no pre-norms, RMSNorm after the attention and after the MLP (before each residual
# add), q/k norms over the full projection width ((a*d,) and (k*d,) weights), the norm weight applied before the
# cast to the input dtype; PEFT 0.21.2 has no default LoRA targets for it.
OLMO2 = Architecture(
    model_type="olmo2", source=_SOURCE.format("olmo2"),
    layout=BlockLayout(pre_attn_norm=False, pre_mlp_norm=False, post_attn_norm=True, post_mlp_norm=True,
                       qk_norm="full", norm_weight="before_cast"),
    keys=ConfigKeys(norm_eps=Real(("rms_norm_eps",), 1e-5)),
    names=ModuleNames(), lora_targets=None,
)

# Phi (phi-1, phi-1.5, phi-2): LayerNorm with bias, attention and MLP in parallel on the one norm's output,
# partial rotary (``partial_rotary_factor``, 0.5 unless the config says), q/k/v/dense and fc1/fc2 with biases
# fixed in the modeling code, a plain gelu_new MLP, lm_head with a bias; q/k LayerNorms per head only with
# ``qk_layernorm`` (default false). ``resid_pdrop`` drops the attention and the MLP outputs, ``embd_pdrop`` the
# embedding output.
_PHI_BIAS = Flag((), True)
PHI = Architecture(
    model_type="phi", source=_SOURCE.format("phi"),
    layout=BlockLayout(norm="layernorm", norm_bias=True, mlp="plain", pre_mlp_norm=False, qk_norm="head",
                       head_bias=True),
    keys=ConfigKeys(activation=Text(("hidden_act", "hidden_activation", "activation_function"), "gelu_new"),
                    norm_eps=Real(("layer_norm_eps",), 1e-5), rotary_fraction=Real(("partial_rotary_factor",), 0.5),
                    qkv_bias=_PHI_BIAS, o_bias=_PHI_BIAS, mlp_bias=_PHI_BIAS, parallel_residual=Flag((), True),
                    qk_norm_enabled=Flag(("qk_layernorm",), False), residual_dropout=Dropout("resid_pdrop", 0.0),
                    embedding_dropout=Dropout("embd_pdrop", 0.0)),
    names=ModuleNames(
        block=BlockNames(o="self_attn.dense", up="mlp.fc1", down="mlp.fc2", q_norm="self_attn.q_layernorm",
                         k_norm="self_attn.k_layernorm", extras=("mlp.activation_fn", "resid_dropout")),
        model=ModelNames(final_norm="model.final_layernorm",
                         outside=("model", "model.embed_tokens", "model.layers", "model.rotary_emb",
                                  "model.embed_dropout", "model.final_layernorm", "lm_head"))),
    lora_targets=("q_proj", "v_proj", "fc1", "fc2"),
)

# Granite (3.x dense): Llama's block and keys with µP scalars (embedding, residual, attention, logits multipliers:
# ``BlockLayout.scalar_multipliers``); PEFT 0.21.2 has no default LoRA targets for it.
GRANITE = Architecture(
    model_type="granite", source=_SOURCE.format("granite"), layout=BlockLayout(scalar_multipliers=True),
    keys=ConfigKeys(mlp_bias=Flag(("mlp_bias",), False)),
    names=ModuleNames(), lora_targets=None,
)

# Gemma 3 (text; a ``gemma3`` multimodal config.json is read through its ``text_config``): Gemma 2's four norms
# with the (1 + w) offset, q/k RMSNorms per head, embedding scaling, sliding and full layers interleaved
# (``layer_types``, else every ``sliding_window_pattern``-th layer full), one rope table per layer type, no
# soft-capping unless the config sets it; sdpa allowed.
GEMMA3_TEXT = Architecture(
    model_type="gemma3_text", source=_SOURCE.format("gemma3"),
    layout=BlockLayout(norm_weight="one_plus_before_cast", embed_scale=True, post_attn_norm=True, post_mlp_norm=True,
                       qk_norm="head", sliding_layers="pattern", rope_per_layer_type=True,
                       sliding_sdpa_mask=True),
    keys=ConfigKeys(kv_heads_default=4, head_dim_default=256, heads_divide_hidden=True,
                    positions=Size("positions", ("max_position_embeddings",), 131_072),
                    activation=Text(("hidden_activation", "hidden_act", "activation_function"), "gelu_pytorch_tanh"),
                    tie_embeddings=Flag(("tie_word_embeddings",), True),
                    attn_softcap=Cap(("attn_logit_softcapping",), None),
                    final_softcap=Cap(("final_logit_softcapping",), None),
                    sliding_window=Window(("sliding_window",), 4096), layer_types=("layer_types",),
                    sliding_pattern=Size("layers", ("sliding_window_pattern",), 6),
                    scales_with_head_dim=("query_pre_attn_scalar",)),
    names=ModuleNames(block=BlockNames(pre_mlp_norm="pre_feedforward_layernorm")), lora_targets=_QV,
)

REGISTRY: dict[str, Architecture] = {a.model_type: a for a in (
    LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA, GEMMA2, PHI3, GPT2, GPT_NEOX, OPT, MIXTRAL,
    OLMO2, PHI, GRANITE, GEMMA3_TEXT)}

# ---- issue 13, second half: falcon, qwen3_moe, gpt_oss, deepseek_v3 ----------------------------------------

_FALCON_BIAS = Flag(("bias",), False)
# Falcon-7B's block (FalconConfig: multi_query, parallel_attn; new_decoder_architecture and alibi off): one
# LayerNorm read by both the attention and the MLP, fused query_key_value (FalconLinear: ``x @ W.T``, saving what
# F.linear saves) split into copies, one key/value head; the eager path computes the softmax in the hidden
# states' dtype and applies no attention dropout (only ALiBi's path does); ``attention_dropout`` drops the
# attention output in the serial block, ``hidden_dropout`` o + f (parallel) or f (serial).
FALCON = Architecture(
    model_type="falcon", source=_SOURCE.format("falcon"),
    layout=BlockLayout(norm="layernorm", norm_bias=True, fused_qkv=True, multi_query_kv_copies=True, mlp="plain",
                       pre_mlp_norm_serial_only=True, parallel_dropout_on_sum=True, eager_softmax_dtype="input",
                       eager_repeat_kv=False, sdpa_direct=True, bias_add_promotes=True),
    keys=ConfigKeys(kv_heads=(), heads_divide_hidden=True,
                    multi_query=Flag(("multi_query",), True),
                    intermediate=Size("intermediate size", ("ffn_hidden_size",), per_hidden=4),
                    activation=Text(("activation",), "gelu"), norm_eps=Real(("layer_norm_epsilon",), 1e-5),
                    tie_embeddings=Flag(("tie_word_embeddings",), True), qkv_bias=_FALCON_BIAS,
                    o_bias=_FALCON_BIAS, mlp_bias=_FALCON_BIAS, parallel_residual=Flag(("parallel_attn",), True),
                    attention_dropout=Dropout("", 0.0), residual_dropout=Dropout("hidden_dropout", 0.0),
                    attn_residual_dropout=Dropout("attention_dropout", 0.0),
                    not_modelled=(("new_decoder_architecture", False, "Falcon-40B's decoder (grouped kv heads, "
                                   "ln_attn and ln_mlp)"), ("alibi", False, "ALiBi positions instead of rotary"))),
    names=ModuleNames(
        block=BlockNames(qkv="self_attention.query_key_value", o="self_attention.dense", up="mlp.dense_h_to_4h",
                         down="mlp.dense_4h_to_h", extras=("self_attention.attention_dropout", "mlp.act")),
        model=ModelNames(layers="transformer.h", embed="transformer.word_embeddings", final_norm="transformer.ln_f",
                         outside=("transformer", "transformer.word_embeddings", "transformer.h", "transformer.ln_f",
                                  "transformer.rotary_emb", "lm_head"))),
    lora_targets=("query_key_value",),
)

# Qwen3-30B-A3B's block (transformers/models/qwen3_moe): Qwen3's attention (q/k norms per head), Mixtral's sparse
# MoE block with ``num_experts`` experts of ``moe_intermediate_size``, the top-k weights renormalised only with
# ``norm_topk_prob`` and cast back to the logits' dtype; the sliding window (with ``use_sliding_window``) on every
# layer. Dense layers (``mlp_only_layers``, ``decoder_sparse_step`` > 1) get Qwen3MoeMLP of ``intermediate_size``
# (``Qwen3MoeDecoderLayer.__init__``): ``ConfigKeys.dense_layers``.
QWEN3_MOE = Architecture(
    model_type="qwen3_moe", source=_SOURCE.format("qwen3_moe"),
    layout=BlockLayout(qk_norm="head", moe=MoeLayout(weights_in_logits_dtype=True), sliding_layers="all"),
    keys=ConfigKeys(kv_heads_default=4, positions=Size("positions", ("max_position_embeddings",), 32768),
                    intermediate=Size("intermediate size", ("moe_intermediate_size",), 768),
                    sliding_window=Window(("sliding_window",), 4096),
                    sliding_enabled=Flag(("use_sliding_window",), False),
                    experts=Size("experts", ("num_experts",), 128),
                    experts_per_token=Size("experts per token", ("num_experts_per_tok",), 8),
                    router_renorm=Flag(("norm_topk_prob",), False),
                    dense_layers=DenseLayers("listed_or_step",
                                             Size("intermediate size", ("intermediate_size",), 6144))),
    names=ModuleNames(block=BlockNames(extras=("mlp.experts.act_fn",))), lora_targets=None,
    peft_expert_names=_QWEN2_MOE_EXPERTS,
)

_GPT_OSS_BIAS = Flag(("attention_bias",), True)
# gpt-oss-20b's block (transformers/models/gpt_oss): Llama's attention with biases, attention sinks and one rope
# table per half of d, sliding (128) and full layers alternating; RMSNorm's weight applied before the cast; a
# sparse MoE with a biased router whose softmax runs over the top-k logits, biased experts stored transposed and a
# clamped SwiGLU. The published checkpoint stores the experts in MXFP4: memfit models the base as transformers
# trains it, dequantised to bf16 (``Mxfp4Config(dequantize=True)``), every weight 2 B; it does not model MXFP4.
GPT_OSS = Architecture(
    model_type="gpt_oss", source=_SOURCE.format("gpt_oss"),
    layout=BlockLayout(norm_weight="before_cast", rotary_half_tables=True, attention_sinks=True,
                       moe=MoeLayout(router="topk_softmax", weights_in_logits_dtype=True, bias=True,
                                     gate="clamped_swiglu"),
                       sliding_layers="alternate"),
    keys=ConfigKeys(kv_heads_default=8, head_dim_default=64,
                    positions=Size("positions", ("max_position_embeddings",), 131072),
                    intermediate=Size("intermediate size", ("intermediate_size",), 2880),
                    norm_eps=Real(("rms_norm_eps",), 1e-5), qkv_bias=_GPT_OSS_BIAS, o_bias=_GPT_OSS_BIAS,
                    sliding_window=Window(("sliding_window",), 128), layer_types=("layer_types",),
                    experts=Size("experts", ("num_local_experts",), 128),
                    experts_per_token=Size("experts per token", ("num_experts_per_tok",), 4)),
    names=ModuleNames(block=BlockNames(router="mlp.router", extras=())), lora_targets=None,
    attention_kernels=("eager", "flash"),
    kernel_note="its attention sinks have no sdpa path: GptOssPreTrainedModel._supports_sdpa is False",
    all_linear_moe=False,
)

# DeepSeek-V3 (and Moonlight, Kimi-style configs of model_type deepseek_v3; transformers/models/deepseek_v3):
# Llama's block with multi-head latent attention (``latent_attention``: q_a/q_b or q_proj, kv_a_proj_with_mqa, the
# q_a/kv_a RMSNorms, kv_b, o; rope on the last qk_rope_head_dim columns, interleaved), a MoE MLP with a sigmoid,
# group-limited router, fused experts (the grouped_mm path in bf16) and shared experts, and a dense MLP of
# ``intermediate_size`` in the first ``first_k_dense_replace`` layers. Multi-head only (key/value heads = heads: MLA
# expands its latent to every head; num_key_value_heads, 128 when absent, must equal the heads). The multi-token
# prediction layers (``num_nextn_predict_layers``) are not built by DeepseekV3ForCausalLM. PEFT 0.21.2 has no
# default LoRA targets for it.
DEEPSEEK_V3 = Architecture(
    model_type="deepseek_v3", source=_SOURCE.format("deepseek_v3"),
    layout=BlockLayout(latent_attention=True, moe=MoeLayout(router="sigmoid_group_topk", weights_in_logits_dtype=True,
                                                             shared_experts=True, router_weight_fp32=True)),
    keys=ConfigKeys(kv_heads=(), kv_heads_equal="num_key_value_heads", kv_heads_default=128,
                    positions=Size("positions", ("max_position_embeddings",), 4096),
                    intermediate=Size("intermediate size", ("moe_intermediate_size",), 2048),
                    experts=Size("experts", ("n_routed_experts",), 256),
                    experts_per_token=Size("experts per token", ("num_experts_per_tok",), 8),
                    router_renorm=Flag(("norm_topk_prob",), True), latent=LatentKeys(),
                    dense_layers=DenseLayers("first_k", Size("intermediate size", ("intermediate_size",), 18432)),
                    shared_experts=Size("experts", ("n_shared_experts",), 1),
                    expert_groups=(("n_group", 8), ("topk_group", 4)),
                    scales_with_hidden=("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                        "v_head_dim", "intermediate_size")),
    names=ModuleNames(block=BlockNames(extras=("mlp.experts.act_fn", "mlp.shared_experts.act_fn"))),
    lora_targets=None, lora_hint="kv_b_proj,o_proj", peft_expert_names=_QWEN2_MOE_EXPERTS,
)

REGISTRY.update((a.model_type, a) for a in (FALCON, QWEN3_MOE, GPT_OSS, DEEPSEEK_V3))
