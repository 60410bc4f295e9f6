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
RouterKind = Literal["softmax_topk_renorm"]
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
    """

    router: RouterKind = "softmax_topk_renorm"
    grouped_mm_precisions: tuple[str, ...] = ("bf16",)


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
    - ``sliding_layers``: which layers attend through the sliding window when the config sets one: ``all``
      (Mistral), ``alternate`` (Gemma 2: even layers sliding, odd full), ``after_max_window_layers`` (Qwen2:
      layers from ``max_window_layers`` on), ``pattern`` (Gemma 3: every ``sliding_pattern``-th layer full, the
      others sliding, i.e. layer i slides when (i + 1) % pattern != 0), ``none``. A config's own ``layer_types``
      list wins.
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
