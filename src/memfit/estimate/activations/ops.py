"""The ops of a decoder block as transformers 5.24, PEFT 0.21.2 and torch 2.13 run them, on a :class:`Tape`.

=====================  ============================================================================
op                     saved for backward (beyond :mod:`.tape`'s rules)
=====================  ============================================================================
linear + LoRA          the base linear; PEFT's branch ``lora_B(lora_A(dropout(x.to(fp32))))``: each
                       adapted linear casts its input to fp32 (a copy lora_A saves) and has its own
                       dropout; under autocast the adapters' bf16 copies are saved too
QLoRA linear           nothing for the frozen 4-bit weight (bitsandbytes' MatMul4Bit keeps the packed
                       weight, a parameter); the output is cast back to x's dtype; the adapter as above
LLM.int8 linear        x itself (``ctx.A`` of MatMul8bitFp on CPU, of MatMul8bitLt on CUDA; CUDA's outlier
                       columns ``subA`` depend on the values: not modelled); the adapter as above
RMSNorm                fp32 copy of x, rsqrt (b*s*4 B), and the normalised x in the input dtype when the
                       norm weight is trained (Gemma: the fp32 product with 1 + w instead)
LayerNorm              x, mean, rstd (fp32 on CUDA or for fp32 x) when anything involved requires grad
activations            silu / gelu: x; relu: its output; gelu_new (GPT-2's tanh formula in Python): x,
                       tanh(.), 0.5x and 1 + tanh(.) through the final multiply
dropout, 0 < p < 1     CUDA: a bool mask (1 B per element); CPU: a noise tensor in x's dtype
rope                   x * cos + rotate_half(x) * sin: cos, sin (shared by every block) and rotate_half(x)
eager attention        q and k (as matmul operands), softmax output (fp32), probabilities in the
                       compute dtype, v:  O(b*a*s^2)
sdpa / flash           q, k, v, output, logsumexp (b*a*s fp32): no s^2 term; CPU sdpa with dropout runs
                       the composite math path (:func:`_sdpa_math`)
=====================  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.activations.tape import SymTensor, Tape
from memfit.estimate.adapter import trains_bias
from memfit.estimate.block_parts import Linear
from memfit.estimate.constants import BOOL_BYTES, FP32_BYTES, INT64_BYTES
from memfit.estimate.lora import adapted_linears, lora_rank, rank_of
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

GELU_TANH_IN_PYTHON = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh_python")  # transformers.activations
Rope = tuple[SymTensor, SymTensor]  # cos, sin: (1, s, rotary d) each


@dataclass(frozen=True, slots=True)
class Replay:
    """One forward replay: the tape, the model and the run; ``adapted`` are the paths of the block linears
    that carry a LoRA adapter."""

    tape: Tape
    model: ModelShape
    spec: RunSpec
    adapted: frozenset[str]

    @classmethod
    def start(cls, model: ModelShape, spec: RunSpec) -> Replay:
        fsdp_mp = spec.precision == "mixed-bf16" and spec.sharding in ("zero2", "zero3", "fsdp", "hsdp")  # bf16 gathers
        tape = Tape(compute_itemsize=spec.compute_bytes, autocast=spec.is_mixed, params_in_compute=fsdp_mp)
        return cls(tape, model, spec, frozenset(lin.path for lin in adapted_linears(model, spec)))

    @property
    def batch(self) -> int:
        return self.spec.batch

    @property
    def seq(self) -> int:
        return self.spec.seq

    @property
    def full(self) -> bool:
        """A full fine-tune: every weight requires grad."""
        return self.spec.method == "full"

    @property
    def float_itemsize(self) -> int:
        """The dtype of the weights that are not quantised (norms, embeddings, lm_head) and so of the embedding
        output and the residual stream: fp32 under QLoRA (``prepare_model_for_kbit_training`` upcasts them),
        else the weights' dtype."""
        return FP32_BYTES if self.spec.is_quantised else self.spec.weight_bytes


# ---- linear layers -----------------------------------------------------------------------------

def linear(rp: Replay, x: SymTensor, lin: Linear, component: str) -> SymTensor:
    """A block linear, x (..., in) -> (..., out), with its LoRA branch when adapted (PEFT ``lora.Linear``)."""
    t = rp.tape
    if rp.spec.method == "qlora":
        # bitsandbytes 0.50 Linear4bit.forward: matmul_4bit(x.to(compute dtype), ...).to(x.dtype); MatMul4Bit
        # keeps only the 4-bit weight (a parameter) for the input gradient, the dequantised weight is a transient
        out = t.new(x.shape[:-1] + (lin.out_features,), x.itemsize, x.requires_grad)
    elif rp.spec.method == "int8-lora":
        # Linear8bitLt.forward: bnb.matmul(x, ...) keeps x on its ctx (MatMul8bitFp on the CPU: F.linear with
        # the dequantised weight, so autocast's dtype under autocast)
        if x.requires_grad:
            t.save(x, component)
            t.held[x.storage] = x.storage_bytes  # a ctx attribute: kept under checkpointing too
        out = t.new(x.shape[:-1] + (lin.out_features,), t.compute_itemsize if t.autocast else x.itemsize,
                    x.requires_grad)
    else:
        w = t.weight((lin.out_features, lin.in_features), rp.spec.weight_bytes, rp.full)
        out = t.linear(x, w, lin.out_features, component)
        if lin.bias and t.autocast and (rp.model.layout.bias_add_promotes or lin.experts > 1):
            # (x @ W.T) + b outside F.linear (FalconLinear; fused experts' x @ W[e] + b[e]): the fp32 bias wins
            out = t.new(out.shape, rp.spec.weight_bytes, out.requires_grad)
    if lin.bias and not out.requires_grad and trains_bias(rp.spec, lin.path in rp.adapted, lin):  # --bias: needs grad
        out = t.op((x,), t.new(out.shape, out.itemsize, True))
    return out if lin.path not in rp.adapted else _lora(rp, x, lin, out)


def _lora(rp: Replay, x: SymTensor, lin: Linear, base: SymTensor) -> SymTensor:
    """PEFT 0.21.2 ``lora.Linear.forward``: x = x.to(lora_A.weight.dtype) (fp32), then
    ``lora_B(lora_A(dropout(x))) * scaling`` added to the base output and cast back to its dtype. Each adapted
    linear has its own dropout and its own cast: q, k and v share nothing. lora_A saves the dropped copy."""
    t, r = rp.tape, lora_rank(lin, rank_of(rp.model, rp.spec, lin))
    xa = dropout(rp, t.cast(x, FP32_BYTES), rp.spec.lora_dropout, "lora/dropout")
    if rp.spec.use_dora:
        dora_weight_norm(rp, lin, r, live=(x, xa, base))
    a_out = t.linear(xa, t.weight((r, lin.in_features), FP32_BYTES, True), r, "lora/A")
    b_out = t.linear(a_out, t.weight((lin.out_features, r), FP32_BYTES, True), lin.out_features, "lora/B")
    if rp.spec.use_dora:
        b_out = _dora_output(rp, xa, lin, base, b_out)
    return t.cast(t.add(base, b_out), base.itemsize)


def dora_weight_norm(rp: Replay, lin: Linear, r: int, live: tuple[SymTensor, ...] = ()) -> None:
    """The temporaries of PEFT 0.21.2 ``DoraLinearLayer.forward`` before its output (``peft/tuners/lora/dora.py``),
    in every training forward (the cache is off in training): a transient on the tape, nothing saved.

    ``get_lora_weight`` runs ``lora_B(lora_A(eye(in)))`` with ``eye`` in the adapter dtype (fp32, in x in), on the
    autograd graph (the adapters require grad): that graph keeps eye (its bf16 copy under autocast) and lora_A's
    output (in x r) until the module's forward returns, though only the detached product is used. The product
    (in x out, fp32: under autocast lora_B's bf16 output is cast to x's dtype, fp32) then enters
    ``get_weight_norm``: ``W + scaling * lora_weight`` (two out x in fp32 tensors at the add) and its row norm.
    A base weight in another dtype than fp32 (bf16 precision, a dequantised QLoRA weight) is first copied to fp32
    (``weight.to(x.dtype)``).
    Alive beside them: ``live`` (the layer's input, its fp32 cast and the base output) where not saved already.

    Worked, fp32, in = out = 4096, r = 16: eye 64 MiB + 0.25 MiB + product 64 MiB + 2 x 64 MiB = 256.25 MiB, plus the
    inputs.
    """
    t, i, o = rp.tape, lin.in_features, lin.out_features
    ac = t.compute_itemsize if t.autocast else FP32_BYTES  # lora_A / lora_B outputs (autocast: bf16)
    # eye (its bf16 copy), lora_A's output; under autocast the bf16 copies of lora_A and lora_B (autocast's cache)
    graph = i * i * ac + i * r * ac + ((o + i) * r * ac if t.autocast else 0)
    product = i * o * FP32_BYTES
    # under autocast the fp32 eye is alive beside its bf16 copy until lora_B's bf16 output is made
    making = (i * i * FP32_BYTES + i * o * ac) if t.autocast else 0
    # QLoRA: dequantize_module_weight makes a new W (dequantize_4bit), then the fp32 copy (measured: rows_quant)
    w_copy = o * i * FP32_BYTES if rp.spec.method == "qlora" or rp.spec.weight_bytes != FP32_BYTES else 0
    inputs = sum({v.storage: v.storage_bytes for v in live if v.storage not in t.saved}.values())
    t.transient(inputs + max(graph + making, graph + product + w_copy + 2 * o * i * FP32_BYTES))


def _dora_output(rp: Replay, xa: SymTensor, lin: Linear, base: SymTensor, lora: SymTensor) -> SymTensor:
    """PEFT 0.21.2 ``DoraLinearLayer.forward``'s output, on lora = ``lora_B(lora_A(x))``::

        mag_norm_scale = (magnitude / weight_norm.detach()).view(1, -1)      saves weight_norm (out, fp32)
        (mag_norm_scale - 1) * base_result + mag_norm_scale * lora * scaling  saves base_result and lora (b*s*out
                                                                             each) and the (1, out) factors
    base_result is the base layer's output (less its bias, a new tensor) when dropout is the identity, else
    ``F.linear(dropout(x), W.to(x.dtype))`` computed again on the dropped fp32 x. Type promotion makes both
    products fp32 under autocast."""
    t, o = rp.tape, lin.out_features
    magnitude = t.param((o,), FP32_BYTES, True)
    scale = t.mul(magnitude, t.new((o,), FP32_BYTES, False), "dora/norm")  # magnitude / weight_norm
    if rp.spec.lora_dropout > 0.0:
        if t.autocast or rp.spec.weight_bytes == FP32_BYTES:
            w = t.weight((o, lin.in_features), FP32_BYTES, False)
        else:
            w = t.new((o, lin.in_features), FP32_BYTES, False)  # weight.to(fp32): a copy the linear saves
        base = t.linear(xa, w, o, "dora/base")
    elif lin.bias:
        base = t.new(base.shape, base.itemsize, base.requires_grad)  # base_result - bias
    minus_one = t.op((scale,), t.new(scale.shape, FP32_BYTES, True))
    scaled_base = t.mul(minus_one, base, "dora/base")
    scaled_lora = t.mul(scale, lora, "dora/lora")
    scaled_lora = t.op((scaled_lora,), t.new(scaled_lora.shape, scaled_lora.itemsize, True))  # * scaling
    return t.add(scaled_base, scaled_lora)


# ---- dropout, norms, activations ---------------------------------------------------------------

def dropout(rp: Replay, x: SymTensor, p: float, component: str) -> SymTensor:
    """``F.dropout(x, p, training=True)`` (torch 2.13 ``at::dropout``): the identity for p == 0 (no op, no
    new tensor). For 0 < p < 1 a new output (x's shape and dtype: dropout is on no autocast list) and,
    when x requires grad, what the backward needs to rescale the gradient:

    - CUDA: the fused ``native_dropout`` kernel, which saves a bool mask, 1 B per element;
    - CPU: ``at::dropout`` takes the fused kernel only on CUDA/XPU/lazy devices; elsewhere it builds
      ``noise = empty_like(x).bernoulli_(1 - p).div_(1 - p)`` and returns ``x * noise``, so the multiply
      saves the noise, a tensor in x's dtype (4 B per element in fp32, 2 in bf16).

    The next op saves the dropped output, not x.
    """
    if p <= 0.0:
        return x
    t = rp.tape
    if x.requires_grad:
        t.save(t.new(x.shape, BOOL_BYTES if rp.spec.device == "cuda" else x.itemsize, False), component)
    return t.op((x,), t.new(x.shape, x.itemsize, x.requires_grad))


def norm(rp: Replay, x: SymTensor, component: str) -> SymTensor:
    """The architecture's norm over x's last dimension (``BlockLayout.norm``)."""
    if rp.model.layout.norm == "rmsnorm":
        return rmsnorm(rp, x, component)
    return layernorm(rp, x, component)


def rmsnorm(rp: Replay, x: SymTensor, component: str) -> SymTensor:
    """RMSNorm over the last dimension n: y32 = x.float() * rsqrt(mean(x^2) + eps), then the weight w (n,).

    Saves the fp32 copy of x and the rsqrt (one fp32 per row). The product with the weight (``BlockLayout.
    norm_weight``) saves its other operand when the weight is trained and gives the wider of the two dtypes:
    Llama ``w * y32.to(x.dtype)`` saves the cast y (fp32 products under mixed precision, where w is fp32);
    OLMo 2 ``(w * y32).to(x.dtype)`` saves y32; Gemma ``(y32 * (1 + w.float())).to(x.dtype)`` saves the fresh
    fp32 ``1 + w`` (n,) when x requires grad, and y32 when w is trained.
    """
    t, n = rp.tape, x.shape[-1]
    x32 = t.cast(x, FP32_BYTES)
    if x32.requires_grad:  # by pow(2) and by x32 * rstd: one storage, two saves (two host copies offloaded)
        t.save(x32, component, times=2)
    rstd = t.new(x.shape[:-1] + (1,), FP32_BYTES, x.requires_grad)
    if x.requires_grad:  # by rsqrt (its output) and by x32 * rstd
        t.save(rstd, component, times=2)
    y32 = t.new(x.shape, FP32_BYTES, x.requires_grad)
    rule = rp.model.layout.norm_weight
    if rule == "one_plus_before_cast":
        return t.cast(t.mul(y32, t.new((n,), FP32_BYTES, rp.full), component), x.itemsize)
    w = t.param((n,), rp.float_itemsize, rp.full)
    if rule == "before_cast":
        return t.cast(t.mul(w, y32, component), x.itemsize)
    return t.mul(w, t.cast(y32, x.itemsize), component)


def layernorm(rp: Replay, x: SymTensor, component: str) -> SymTensor:
    """``nn.LayerNorm``: saves x, the mean and the rstd (per row; fp32 on CUDA or for fp32 x, else x's dtype)
    when x or the affine weight requires grad."""
    t = rp.tape
    rg = x.requires_grad or rp.full or (rp.spec.bias == "all" and rp.model.layout.norm_bias)  # --bias all: it trains
    if rg:
        t.save(x, component)
        stat = FP32_BYTES if (rp.spec.device == "cuda" or x.itemsize == FP32_BYTES) else x.itemsize
        t.save(t.new(x.shape[:-1] + (1,), stat, False), component)
        t.save(t.new(x.shape[:-1] + (1,), stat, False), component)
    return t.new(x.shape, x.itemsize, rg)


def activation(rp: Replay, x: SymTensor, component: str, *, pending: int = 0) -> SymTensor:
    """The model's MLP activation (``ModelShape.activation``, a ``transformers.activations`` name)."""
    t = rp.tape
    if rp.model.activation in GELU_TANH_IN_PYTHON:
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), op by op in Python
        if x.requires_grad:
            t.save(x, component)  # pow
        tanh = t.new(x.shape, x.itemsize, x.requires_grad)
        if x.requires_grad:
            t.save(tanh, component)  # tanh's output
        half = t.new(x.shape, x.itemsize, x.requires_grad)
        one_plus_tanh = t.new(x.shape, x.itemsize, x.requires_grad)
        return t.mul(half, one_plus_tanh, component, pending=pending)
    if rp.model.activation == "relu":
        return t.unary_saving_output(x, component, pending=pending)  # threshold_backward reads the result
    return t.unary_saving_input(x, component, pending=pending)


def rope(rp: Replay, x: SymTensor, cos_sin: Rope, component: str) -> SymTensor:
    """``x * cos + rotate_half(x) * sin`` on the rotary part of the last dimension (``rotary_fraction`` of d);
    the rest is concatenated back (a new tensor). x: (b, a, s, d)."""
    t, cos, sin = rp.tape, *cos_sin
    frac = rp.model.rotary_fraction
    rot = x.view(*x.shape[:-1], int(x.shape[-1] * frac)) if frac < 1.0 else x  # x[..., :rotary_dim]
    a = t.mul(rot, cos, f"{component}/rope")
    rotated = t.new(rot.shape, rot.itemsize, rot.requires_grad)  # cat(-x2, x1)
    out = t.add(a, t.mul(rotated, sin, f"{component}/rope"))
    if frac < 1.0:
        out = t.new(x.shape, out.itemsize, out.requires_grad)  # cat((rotated, pass), dim=-1)
    return out


# ---- attention kernels -------------------------------------------------------------------------

def attention(rp: Replay, q: SymTensor, k: SymTensor, v: SymTensor, component: str = "attention", *,
              heads_first: bool = False) -> SymTensor:
    """q: (b, a, s, d); k, v: (b, kv, s, d) -> output (b, s, a*d). ``heads_first``: q is laid out
    contiguous in (b, a, s, d) rather than as a transposed (b, s, a, d) view (see :func:`_fused`). v may be
    narrower than q and k (multi-head latent attention): the output is (b, s, a * v's width)."""
    if rp.spec.attention == "eager":
        return _eager(rp, q, k, v, component)
    if q.shape[-1] != v.shape[-1] and rp.spec.device == "cpu" and rp.spec.attention == "sdpa":
        # torch 2.13's CPU flash kernel takes one head width for q, k and v (check_head_dim_size_cpp): the math path
        t = rp.tape
        if t.autocast:
            q, k, v = (t.cast(x, t.compute_itemsize) for x in (q, k, v))
        return _sdpa_math(rp, q, k, v, component, v_contiguous=False)
    return _fused(rp, q, k, v, component, heads_first=heads_first)


def _eager(rp: Replay, q: SymTensor, k: SymTensor, v: SymTensor, component: str) -> SymTensor:
    """transformers' ``eager_attention_forward``: repeat_kv, q @ k^T, (soft-capping), softmax, dropout, @ v."""
    t, m, lay = rp.tape, rp.model, rp.model.layout
    b, s, a, d = rp.batch, rp.seq, m.n_heads, m.head_dim
    if a > m.n_kv_heads and (lay.eager_repeat_kv or (lay.sdpa_direct and b > 1)):
        # repeat_kv, or (Falcon) the matmuls' broadcast of k and v over the heads: copies
        k = t.new((b, a, s, d), k.itemsize, k.requires_grad)
        v = t.new((b, a, s, d), v.itemsize, v.requires_grad)
    elif lay.sdpa_direct and not m.multi_query and b > 1:
        # Falcon without multi-query: v is a strided view of the fused qkv output, which the bmm's reshape copies
        v = t.new((b, a, s, d), v.itemsize, v.requires_grad)
    scores = t.matmul(q, k, (b, a, s, s), f"{component}/qk")  # (b, a, s, s)
    d = v.shape[-1]  # the output's head width (v narrower than q and k under MLA)
    if lay.attention_sinks:
        return _eager_with_sinks(rp, scores, v, component)
    if m.attn_softcap:
        scores = t.new(scores.shape, scores.itemsize, scores.requires_grad)  # / softcap
        scores = t.unary_saving_output(scores, f"{component}/softcap")  # tanh
        scores = t.new(scores.shape, scores.itemsize, scores.requires_grad)  # * softcap
    if lay.eager_softmax_dtype == "input":
        # GPT-2: softmax in the scores' dtype, except under autocast, which runs softmax in fp32 (on CPU's and
        # CUDA's fp32 lists); then .type(value.dtype) makes the compute-dtype copy
        p = t.unary_saving_output(scores, f"{component}/scores", FP32_BYTES if t.autocast else None)
        p = t.cast(p, v.itemsize)
    else:
        p = t.cast(t.unary_saving_output(scores, f"{component}/scores", FP32_BYTES), q.itemsize)  # .to(q.dtype)
    # F.dropout(attn_weights, p=dropout): its mask, and the product with v saves the dropped copy
    p = dropout(rp, p, m.attention_dropout, f"{component}/dropout")
    o = t.matmul(p, v, (b, a, s, d), f"{component}/pv")
    return t.new((b, s, a * d), o.itemsize, o.requires_grad)  # transpose(1, 2).contiguous()


def _eager_with_sinks(rp: Replay, scores: SymTensor, v: SymTensor, component: str) -> SymTensor:
    """GPT-OSS's ``eager_attention_forward`` after q @ k^T (``BlockLayout.attention_sinks``)::

        logits = cat([scores * scale + mask, sinks (b, a, s, 1)], -1)   # (b, a, s, s + 1); fp32 under autocast
        logits = logits - logits.max(-1, keepdim=True).values          # max saves its indices (b, a, s, 1) int64
        probs = softmax(logits, dtype=logits.dtype)                    # saves its output
        p = probs[..., :-1].to(v.dtype)                                # a view, or (autocast) a bf16 copy
        out = p @ v                                                    # saves p (the view keeps probs) and v
    """
    t, m = rp.tape, rp.model
    b, s, a, d = rp.batch, rp.seq, m.n_heads, m.head_dim
    logits = t.new((b, a, s, s + 1), FP32_BYTES if t.autocast else scores.itemsize, scores.requires_grad or rp.full)
    t.save(t.new((b, a, s, 1), INT64_BYTES, False), f"{component}/scores")  # max's indices
    probs = t.unary_saving_output(logits, f"{component}/scores")
    p = t.cast(probs.view(b, a, s, s), v.itemsize)
    p = dropout(rp, p, m.attention_dropout, f"{component}/dropout")
    o = t.matmul(p, v, (b, a, s, d), f"{component}/pv")
    return t.new((b, s, a * d), o.itemsize, o.requires_grad)  # transpose(1, 2).contiguous()


def _fused(rp: Replay, q: SymTensor, k: SymTensor, v: SymTensor, component: str, *,
           heads_first: bool = False) -> SymTensor:
    """``scaled_dot_product_attention`` (flash / memory-efficient / CPU flash kernels) and flash-attention-2.

    The CPU flash kernel's output takes q's memory layout. q from its own projection is a transposed view
    of (b, s, a, d) and keeps that layout through rope, so transformers' ``transpose(1, 2).contiguous()``
    of the output is a view. With ``heads_first`` (q contiguous in (b, a, s, d): rope applied to slices of
    a fused qkv output, Phi-3 and GPT-NeoX, or a partial rope's final cat, Phi) it is a copy, b*s*a*d in
    q's dtype, which the output projection saves when it trains (a real fp32 step of a 2-layer Phi-3, b1 s32
    a4 d16: 8,192 B a block)."""
    t, m, spec = rp.tape, rp.model, rp.spec
    b, s, a, kv, d = rp.batch, rp.seq, m.n_heads, m.n_kv_heads, v.shape[-1]
    if t.autocast:
        q, k, v = (t.cast(x, t.compute_itemsize) for x in (q, k, v))
    if m.layout.sdpa_direct and spec.attention == "sdpa" and a != kv:
        # Falcon calls sdpa itself with one key/value head and no enable_gqa: no fused kernel takes differing
        # head counts, so torch runs the math path, which broadcasts k and v (copies) in its matmuls
        return _sdpa_math(rp, q, k, v, component, v_contiguous=False, broadcast_kv=True)
    # transformers passes enable_gqa=True to sdpa when there is no mask and head_dim <= 256; otherwise it
    # repeats k and v to all heads (copies) before the call
    gqa_native = spec.attention == "flash" or (not spec.padding_mask and d <= 256)
    repeated = a != kv and not gqa_native
    if repeated:
        k = t.new((b, a, s, d), k.itemsize, k.requires_grad)
        v = t.new((b, a, s, d), v.itemsize, v.requires_grad)
    if m.attention_dropout > 0.0 and spec.attention == "sdpa" and spec.device == "cpu":
        return _sdpa_math(rp, q, k, v, component, v_contiguous=repeated)
    # CUDA's flash and memory-efficient kernels apply dropout inside the kernel and recompute the mask in
    # the backward from the RNG seed and offset, which torch 2.13 keeps as two 0-d int64 *host* tensors
    # (``at::scalar_tensor(seed, at::dtype(at::kLong))`` in flash_api.cpp mha_fwd and in
    # ``_efficient_attention_forward``, outside CUDA-graph capture): no GPU bytes, whatever dropout_p is.
    rg = q.requires_grad or k.requires_grad or v.requires_grad
    out = t.new((b, a, s, d), q.itemsize, rg)
    if rg:
        for x in (q, k, v, out):
            t.save(x, f"{component}/kernel")
        if (spec.padding_mask or m.layout.sdpa_direct) and spec.attention == "sdpa":
            # the additive (b, 1, s, s) mask in the compute dtype, expanded per call and kept by the kernel
            t.save(t.new((b, 1, s, s), t.compute_itemsize, False), f"{component}/mask")
        t.save(t.new((b, a, s), FP32_BYTES, False), f"{component}/kernel")  # logsumexp
        t.op((q, k, v), out)
    # sdpa returns a (b, s, a, d) view; transformers transposes it back and reshapes: for the CPU kernel the
    # result is already contiguous in (b, s, a, d) unless q was heads-first
    if heads_first and spec.device == "cpu":
        return t.new((b, s, a * d), out.itemsize, out.requires_grad)
    return out.view(b, s, a * d)


def _sdpa_math(rp: Replay, q: SymTensor, k: SymTensor, v: SymTensor, component: str, *,
               v_contiguous: bool, broadcast_kv: bool = False) -> SymTensor:
    """CPU ``scaled_dot_product_attention`` with ``dropout_p > 0``: torch 2.13's CPU flash kernel has no
    dropout (``check_for_dropout`` in sdp_utils_cpp), so sdpa runs the composite
    ``_scaled_dot_product_attention_math``, in fp32 whatever the input dtype (bf16/fp16 q, k, v are
    upcast; under autocast after autocast's own cast to bf16), with no autocast inside::

        q' = q * sqrt(scale); k' = repeat_kv(k)^T * sqrt(scale)      # new fp32 (b*a, s, d): the bmm saves both
        p  = _safe_softmax(q' @ k')                                  # saves its output, fp32 b*a*s*s
        p  = dropout(p)                                              # CPU: the fp32 noise, b*a*s*s
        o  = p @ v'                                                  # saves the dropped p and v'
        o.to(q.dtype), then transformers' transpose(1, 2).contiguous()

    Saved per layer: 3 fp32 (b, a, s, d) tensors + 3 fp32 (b, a, s, s) tensors, the O(s^2) that the fused
    kernel avoids. A padding mask is added in place (not saved). Checked against a real step: GPT-2
    (b=2, s=24, a=4, d=16, fp32) keeps 3 * 12,288 + 3 * 18,432 = 92,160 B in ``attn``.

    v' is the bmm's (b*a, s, d) operand: a copy (v.float(), the GQA repeat_interleave, or the reshape of a
    transposed view), except for an fp32 v that reshapes as a view: v already contiguous (transformers'
    repeat_kv), or batch 1, where (1, a, s, d) -> (a, s, d) only drops a dimension. Then v' keeps v's
    whole storage: for GPT-2 at batch 1 the 3h-wide c_attn output (T*3h*4 B, not T*h*4).

    ``broadcast_kv`` (Falcon's multi-query k and v, (b, 1, s, d), no ``enable_gqa``): the math path keeps them at
    their own heads (k' = k * sqrt(scale) fp32 (b, kv, s, d); v' = v, or its fp32 copy) and its matmuls broadcast
    them over the heads: a (b*a, s, d) copy each (what the bmm saves) unless b = 1, where the expanded view
    reshapes without one. Worked (b=1, a=4, s=32, d=16, fp32): q' 8,192 + k' 2,048 + p 16,384 + v 2,048 B =
    28,672 B per layer, as a real step saves.
    """
    t, m = rp.tape, rp.model
    b, s, a, d, dq = rp.batch, rp.seq, m.n_heads, v.shape[-1], q.shape[-1]  # dq > d under MLA
    rg = q.requires_grad or k.requires_grad or v.requires_grad
    qs = t.op((q,), t.new((b, a, s, dq), FP32_BYTES, q.requires_grad))  # query_acc * scaling_factor
    kv_heads = m.n_kv_heads if broadcast_kv and b == 1 else a  # the bmm operand's heads (see above)
    ks = t.op((k,), t.new((b, kv_heads, s, dq), FP32_BYTES, k.requires_grad))  # key (repeat_interleave).T * scaling
    if ks.requires_grad:
        t.save(qs, f"{component}/qk")
    if qs.requires_grad:
        t.save(ks, f"{component}/qk")
    scores = t.op((qs, ks), t.new((b, a, s, s), FP32_BYTES, rg))
    p = t.unary_saving_output(scores, f"{component}/scores")
    p = dropout(rp, p, m.attention_dropout, f"{component}/dropout")
    math_repeat = m.n_heads != m.n_kv_heads and not v_contiguous  # enable_gqa: repeat_interleave inside
    if broadcast_kv and b == 1:
        vv = v if v.itemsize == FP32_BYTES else t.new(v.shape, FP32_BYTES, v.requires_grad)  # value_acc, unrepeated
    elif v.itemsize == FP32_BYTES and not math_repeat and (v_contiguous or rp.batch == 1):
        vv = v  # a view of v's storage
    else:
        vv = t.new((b, a, s, d), FP32_BYTES, v.requires_grad)  # a contiguous fp32 copy
    if p.requires_grad:
        t.save(vv, f"{component}/pv")
    if vv.requires_grad:
        t.save(p, f"{component}/pv")
    o = t.op((p, vv), t.new((b, a, s, d), FP32_BYTES, rg))
    return t.new((b, s, a * d), q.itemsize, o.requires_grad)
