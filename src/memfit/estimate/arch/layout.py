"""How one decoder block computes, as flags: what the estimate's op replay, parameter count and LoRA
modelling read instead of architecture names (litgpt's ``Config`` flags are the model).

A block, in the order :mod:`memfit.estimate.activations.block` replays it::

    a = pre_attn_norm(x)           if pre_attn_norm              (else a = x)
    q, k, v = qkv(a)               fused_qkv: one projection, three views of it
    q = q * scale                  if scale_query (a new tensor)
    q, k = qk_norm(q), qk_norm(k)  qk_norm "head" (over d) or "full" (over a*d and k*d)
    q, k = rope(q), rope(k)        position "rotary" (on the first rotary_fraction of d)
    o = o_proj(attention(q, k, v))
    o = post_attn_norm(o)          if post_attn_norm
    serial:    x = x + o;  m = pre_mlp_norm(x) if pre_mlp_norm else x
    parallel:  m = pre_mlp_norm(x) if pre_mlp_norm else a      (the attention's norm output, shared)
    f = mlp(m)                     "gated": down(act(gate(m)) * up(m)), fused_gate_up: one projection;
                                   "plain": down(act(up(m))); moe: router + experts (:class:`MoeLayout`)
    f = post_mlp_norm(f)           if post_mlp_norm
    return x + f  (serial)   |   x + o + f  (parallel)

Facts a config can change (biases, GPT-NeoX's ``use_parallel_residual``, soft-capping values, the sliding
window, OPT's final norm) are :class:`~memfit.estimate.arch.keys.ConfigKeys` entries with transformers'
default, resolved on :class:`~memfit.estimate.shape.ModelShape`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NormKind = Literal["rmsnorm", "layernorm"]
MlpKind = Literal["gated", "plain"]
PositionKind = Literal["rotary", "learned"]
QkNorm = Literal["none", "head", "full"]
SoftmaxDtype = Literal["fp32", "input"]
SlidingLayers = Literal["none", "all", "alternate", "after_max_window_layers", "pattern"]
RouterKind = Literal["softmax_topk_renorm", "topk_softmax", "sigmoid_group_topk"]
ExpertGate = Literal["swiglu", "clamped_swiglu"]
LayerType = Literal["full", "sliding"]
NormWeight = Literal["after_cast", "before_cast", "one_plus_before_cast"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeLayout:
    """A sparse mixture-of-experts MLP as transformers 5 builds it: a router weight (``mlp.gate``, a plain
    parameter) and two fused 3-D expert parameters, gate_up (E, 2i, h) and down (E, h, i).

    ``router``: ``softmax_topk_renorm`` is Mixtral's (softmax over the E logits in fp32, top-k, the k weights
    divided by their sum). ``grouped_mm_precisions``: the precisions whose expert weights ``torch._grouped_mm``
    takes (bf16 only, on CPU too; autocast does not cast for it); under the others transformers runs its
    eager per-expert loop (``experts_implementation="eager"``), which a fake-tensor trace cannot run (its
    ``nonzero`` has a data-dependent shape).

    ``weights_in_logits_dtype``: the top-k routing weights are cast back to the router logits' dtype before they
    weight the expert outputs (Qwen3-MoE's ``router_top_value.to(router_logits.dtype)``; Mixtral keeps them
    fp32). Whether the k weights are divided by their sum is a config fact (``ConfigKeys.router_renorm``:
    Qwen3-MoE's ``norm_topk_prob``; Mixtral always).

    GPT-OSS (``transformers/models/gpt_oss``): ``router="topk_softmax"`` (top-k of the logits, then a softmax
    over the k in the logits' dtype: the k indices and the k probabilities are saved, no (T, E) softmax); ``bias``:
    the router and both expert parameters have biases ((E,), (E, 2i), (E, h); the experts' stored transposed,
    (E, h, 2i) and (E, i, h), which changes no count); ``gate="clamped_swiglu"``: ``gate.clamp(max=l)``,
    ``up.clamp(-l, l)``, ``(up + 1) * gate * sigmoid(alpha * gate)`` on the interleaved halves, which keeps per
    routed row the gate_up output (2i, both clamps' input) and four (i) tensors (clamped gate, sigmoid, up + 1,
    the glu) where SwiGLU keeps one.

    DeepSeek-V3 (``transformers/models/deepseek_v3``): ``router="sigmoid_group_topk"`` (an fp32 ``F.linear`` of
    ``x.float()``, a sigmoid over the E logits (saved), the group-limited top-k on the sigmoid plus
    ``e_score_correction_bias`` (indices only: nothing of that search outlives the router), ``gather`` of the k
    scores (its index saved), their renormalisation with ``norm_topk_prob`` and the scaling by
    ``routed_scaling_factor`` (a Python float: saves nothing)); ``shared_experts``: a gated MLP of
    ``moe_intermediate_size * n_shared_experts`` (``ModelShape.shared_intermediate``) on the block's MLP input,
    added to the routed experts' output. ``router_weight_fp32``: the router weight is created fp32 and stays fp32
    in a bf16/fp16 model (``DeepseekV3TopkRouter`` builds it with ``dtype=torch.float32``, and the model lists
    ``gate.weight`` in ``_keep_in_fp32_modules_strict``, which ``from_pretrained`` honours for bf16 and fp16):
    4 B per element whatever ``--precision``, in the weights, and for a full fine-tune in its gradient and AdamW
    moments too.
    """

    router: RouterKind = "softmax_topk_renorm"
    grouped_mm_precisions: tuple[str, ...] = ("bf16",)
    weights_in_logits_dtype: bool = False
    bias: bool = False
    gate: ExpertGate = "swiglu"
    shared_experts: bool = False
    router_weight_fp32: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockLayout:
    """The flags of one decoder block; each names where transformers 5.24 does it (see the module docstring).

    - ``norm``, ``norm_bias``: RMSNorm (no bias) or LayerNorm (with a bias when ``norm_bias``).
    - ``norm_weight``: where RMSNorm applies its weight w to the fp32 normalised x, y32: ``after_cast`` (Llama:
      ``w * y32.to(dtype)``), ``before_cast`` (OLMo 2: ``(w * y32).to(dtype)``, an fp32 product) or
      ``one_plus_before_cast`` (Gemma: ``(y32 * (1 + w.float())).to(dtype)``, a fresh fp32 ``1 + w``: the weight
      offset).
    - ``pre_attn_norm`` .. ``post_mlp_norm``: which of the four norm slots exist (Gemma 2 has all four; OLMo 2
      only the two post norms; Llama the two pre norms). With ``parallel_residual`` and no pre-MLP norm the MLP
      reads the attention norm's output (Phi, Falcon).
    - ``qk_norm``: a norm on q and k after their projections, per head (Qwen3, over d) or over the full
      projection width (OLMo 2, over a*d and k*d).
    - ``fused_qkv`` / ``fused_gate_up``: one projection whose output is viewed as q, k, v (or gate, up); a
      saved view keeps the whole fused output alive.
    - ``scale_query``: q is multiplied by d**-0.5 right after its projection (OPT), a new tensor.
    - ``mlp``: ``gated`` (SwiGLU-style, three linears) or ``plain`` (two linears); ``moe`` replaces the MLP.
    - ``position``: ``rotary`` (cos/sin made once per forward, (1, s, d)) or ``learned`` (an embedding table
      with ``position_offset`` extra rows: OPT's 2; ``position_ids_per_row``: OPT builds (b, s) position ids
      from the attention mask, GPT-2 (1, s)).
    - ``embed_scale``: the embedding output times sqrt(h) as a 0-dim tensor (Gemma).
    - eager attention: ``eager_softmax_dtype`` ``fp32`` (``softmax(..., dtype=float32)`` then ``.to(q.dtype)``)
      or ``input`` (GPT-2: in the scores' dtype, fp32 only under autocast); ``eager_repeat_kv``: k and v are
      repeated to every head (``repeat_kv`` copies) when heads > kv heads; ``eager_qkv_copies``: the matmuls
      take non-contiguous views of the fused qkv output and copy them (GPT-2's ``_attn``).
    - ``pre_mlp_norm_serial_only``: the pre-MLP norm exists only when the config's residual is serial (Falcon's
      ``post_attention_layernorm``, built only with ``parallel_attn: false``; parallel, the MLP reads the
      attention norm's output).
    - ``multi_query_kv_copies``: under multi-query attention (one key/value head, ``ModelShape.multi_query``) k
      and v are indexed out of the fused qkv output with a list (Falcon's ``fused_qkv[..., [-2], :]``): copies of
      (b, s, d) each, where a saved view would keep the whole fused output.
    - ``parallel_dropout_on_sum``: a parallel block drops out ``o + f`` once (Falcon's
      ``dropout_add(mlp_output + attention_output, residual, hidden_dropout)``), not o and f each.
    - ``sdpa_direct``: the attention is the model's own code, not transformers' attention functions (Falcon): k and
      v keep their key/value heads (no ``repeat_kv``), and the matmuls broadcast them over the heads, a copy
      unless the batch is 1 (the expanded (1, a, ...) view then reshapes without one); it calls
      ``scaled_dot_product_attention`` itself, always with the causal mask materialised (``allow_is_causal_skip=
      False``), which the fused kernel keeps, and without ``enable_gqa``, so with fewer key/value heads than
      heads torch runs the composite math path (fp32, O(s^2)).
    - ``bias_add_promotes``: the block linears add their bias after the matmul (Falcon's ``FalconLinear``:
      ``x @ W.T + b``), so under autocast the compute-dtype product plus the fp32 bias is an fp32 tensor.
    - ``rotary_half_tables``: cos and sin are (1, s, d/2) (GPT-OSS's ``_apply_rotary_emb`` rotates the two halves
      of q and k by the same table: no ``cat((freqs, freqs))``).
    - ``attention_sinks``: a learned logit per head joins every row of the scores (GPT-OSS's ``sinks``, (a,)):
      eager concatenates it as a column, (b, a, s, s + 1), subtracts the row max (its indices are saved, int64)
      and runs the softmax in the scores' dtype (fp32 under autocast, where the fp32 mask is added first).
    - ``sliding_layers``: which layers attend through the sliding window when the config sets one: ``all``
      (Mistral), ``alternate`` (Gemma 2: even layers sliding, odd full), ``after_max_window_layers`` (Qwen2:
      layers from ``max_window_layers`` on), ``pattern`` (Gemma 3: every ``sliding_pattern``-th layer full, the
      others sliding, i.e. layer i slides when (i + 1) % pattern != 0), ``none``. A config's own ``layer_types``
      list wins.
    - ``latent_attention``: multi-head latent attention (DeepSeek-V2/V3: :class:`~memfit.estimate.block_parts.
      Latent`): q = q_b(q_a_norm(q_a(x))) (or one q projection), a latent kv_a(x) split into the normed kv part
      and one rope part shared by the heads, k and v from kv_b(latent); rope on the last ``rope`` columns of q and
      k (``head_dim`` is the rope width, as ``DeepseekV3Config`` sets it); v narrower than q and k, which sends CPU
      sdpa to its math path and makes flash pad v.
    - ``head_bias``: lm_head has a bias (V parameters; Phi's ``nn.Linear(h, V, bias=True)``), also when the
      weight is tied to the embedding.
    - ``scalar_multipliers``: Granite's µP scalars, each a Python float multiplying a tensor into a new one that
      saves nothing: the embedding output (``embedding_multiplier``), the attention and MLP outputs before their
      residual adds (``residual_multiplier``), the logits (``/ logits_scaling``). The attention scale
      (``attention_multiplier``) replaces d**-0.5 and makes no tensor.
    - ``rope_per_layer_type``: one cos/sin pair per attention type in the model (Gemma 3: a global and a local
      rope base), each made once per forward and shared by the layers of its type.
    - ``sliding_sdpa_mask``: under sdpa a sliding layer takes an explicit (b, 1, s, s) mask once the sequence
      reaches the window (transformers 5.24 ``masking_utils._ignore_causal_mask_sdpa``: no ``is_causal`` shortcut
      when ``kv_length >= sliding_window``), with what a mask brings (the mask kept by the kernel, k and v repeated
      to every head): the padding-mask path, for those layers only. The rule holds for every sliding layout;
      the flag is on for Gemma 3 (window 512-1024, sequences beyond it are the common case) and off elsewhere,
      whose estimates it leaves as they were.
    """

    norm: NormKind = "rmsnorm"
    norm_bias: bool = False
    norm_weight: NormWeight = "after_cast"
    pre_attn_norm: bool = True
    post_attn_norm: bool = False
    pre_mlp_norm: bool = True
    post_mlp_norm: bool = False
    qk_norm: QkNorm = "none"
    fused_qkv: bool = False
    scale_query: bool = False
    fused_gate_up: bool = False
    mlp: MlpKind = "gated"
    moe: MoeLayout | None = None
    position: PositionKind = "rotary"
    position_offset: int = 0
    position_ids_per_row: bool = False
    embed_scale: bool = False
    eager_softmax_dtype: SoftmaxDtype = "fp32"
    eager_repeat_kv: bool = True
    eager_qkv_copies: bool = False
    sliding_layers: SlidingLayers = "none"
    head_bias: bool = False
    scalar_multipliers: bool = False
    rope_per_layer_type: bool = False
    sliding_sdpa_mask: bool = False
    pre_mlp_norm_serial_only: bool = False
    multi_query_kv_copies: bool = False
    parallel_dropout_on_sum: bool = False
    sdpa_direct: bool = False
    bias_add_promotes: bool = False
    rotary_half_tables: bool = False
    attention_sinks: bool = False
    latent_attention: bool = False
