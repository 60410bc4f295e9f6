"""Activations: what autograd keeps from the forward for the backward, op by op, for one training step.

The forward of each architecture is replayed symbolically, op by op, as transformers 5 writes it, on
abstract tensors that carry only (elements, bytes per element, requires_grad, storage). Each op saves what
PyTorch's derivative formula needs *for the inputs that require grad*, which is how autograd decides:

=====================  ============================================================================
op                     saved for backward
=====================  ============================================================================
linear(x, W)           x if W requires grad; W (or its autocast bf16 copy) if x requires grad
a * b (tensors)        b if a requires grad; a if b requires grad
silu / gelu(x)         x;  gelu_new (GPT-2's tanh formula in Python): x, 0.5x, tanh(.), 1+tanh(.)
softmax, tanh          the output
x.to(dtype), add, cat  nothing (a cast makes a new storage unless the dtype already matches)
RMSNorm (Llama)        fp32 copy of x, rsqrt (b*s*4 B), and the normalised x in the input dtype when
                       the norm weight is trained
LayerNorm              x, mean, rstd (when anything involved requires grad)
eager attention        q and k (as matmul operands), softmax output (fp32), probabilities in the
                       compute dtype, v:  O(b*a*s^2)
sdpa / flash           q, k, v, output, logsumexp (b*a*s fp32): no s^2 term
dropout(x), 0 < p < 1  CUDA: a bool mask (1 B per element); CPU: a noise tensor in x's dtype; the next op
                       saves the dropped copy (model dropout from the config, PEFT's ``lora_dropout``)
sdpa, dropout, CPU     the composite math path (the CPU flash kernel has no dropout): fp32 q', k', v'
                       copies (3 b*a*s*d) and softmax output, noise, dropped probabilities (3 b*a*s*s)
embedding              the token ids (int64) when the table is trained
cross-entropy          log-softmax output, fp32 b*s*V, the shifted labels (int64)
PEFT ParamWrapper      (MoE, ``all-linear``) the effective expert weight W + delta, E*out*in in the
                       weight dtype, made once per forward and kept by the expert matmuls, which now
                       also save their input rows; bf16 copies of the adapter factors
=====================  ============================================================================

Under autocast (``mixed-*``) every linear / matmul / sdpa input is cast to the compute dtype: the cast
copies are what is saved, one per consumer (q, k and v each save their own bf16 copy of the normed
input), and frozen weights are cast again at every call, so a frozen linear whose input requires grad
keeps a bf16 copy of its weight alive until its backward runs.

A storage is counted once however many ops save it (views share storage). Parameters are not
activations. Layers 1..L-1 are identical; layer 0 differs because its input (the embedding output)
does not require grad when the embedding is frozen (LoRA), so it saves less.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memfit.errors import MemfitError
from memfit.estimate.lora import (
    adapted_linears,
    block_linears_by_path,
    lora_linear_params,
    lora_params_per_layer,
    lora_rank,
    saved_modules,
)
from memfit.estimate.shape import Linear, ModelShape
from memfit.estimate.spec import RunSpec

FP32 = 4
INT64 = 8


@dataclass(slots=True)
class _T:
    """An abstract tensor: element count, bytes per element, requires_grad, storage id and storage size.

    A view (``qkv[..., :q]``, ``chunk``) shares the storage id and size of its base: saving any view keeps
    the whole storage alive.
    """

    numel: int
    bpe: int
    rg: bool
    sid: int
    sbytes: int = 0

    @property
    def nbytes(self) -> int:
        return self.sbytes or self.numel * self.bpe

    def view(self, numel: int) -> _T:
        return _T(numel, self.bpe, self.rg, self.sid, self.nbytes)


@dataclass(slots=True)
class _Param:
    numel: int
    bpe: int
    rg: bool


@dataclass
class _Ctx:
    """State of one symbolic forward: saved storages (sid -> bytes, component) and knobs."""

    spec: RunSpec
    shape: ModelShape
    autocast: bool
    c: int  # compute dtype bytes
    saved: dict[int, tuple[int, str]] = field(default_factory=dict)
    param_sids: set[int] = field(default_factory=set)
    next_sid: int = 0
    transient: int = 0  # largest short-lived extra seen inside the layer (forward)
    saved_total: int = 0  # running sum of saved bytes (forward order)
    events: list[tuple[int, int]] = field(default_factory=list)  # (saved_total after op, backward transient)

    def op(self, inputs: tuple[_T, ...], out: _T) -> _T:
        """Record an op for the backward replay: when its backward runs, the gradient of its output and
        of each input that requires grad are alive at once, beside every tensor saved up to this op."""
        if out.rg:
            grads = out.numel * out.bpe + sum(i.numel * i.bpe for i in inputs if i.rg)
            self.events.append((self.saved_total, grads))
        return out

    def new(self, numel: int, bpe: int, rg: bool) -> _T:
        self.next_sid += 1
        return _T(numel, bpe, rg, self.next_sid)

    def save(self, t: _T, comp: str) -> None:
        if t.sid in self.saved or t.sid in self.param_sids:
            return
        self.saved[t.sid] = (t.nbytes, comp)
        self.saved_total += t.nbytes

    # ---- ops ------------------------------------------------------------------------------
    def cast(self, t: _T, bpe: int) -> _T:
        return t if t.bpe == bpe else self.new(t.numel, bpe, t.rg)

    def weight_tensor(self, p: _Param) -> _T:
        """The weight as the op sees it: the parameter itself, or an autocast copy in the compute dtype."""
        if self.autocast and p.bpe != self.c:
            return self.new(p.numel, self.c, p.rg)
        t = self.new(p.numel, p.bpe, p.rg)
        self.param_sids.add(t.sid)
        return t

    def linear(self, x: _T, out_numel: int, w: _Param, comp: str) -> _T:
        xc = self.cast(x, self.c) if self.autocast else x
        wt = self.weight_tensor(w)
        if w.rg:
            self.save(xc, comp)
        if xc.rg:
            self.save(wt, comp + "/weight_copy" if wt.sid not in self.param_sids else comp)
        return self.op((xc,), self.new(out_numel, self.c if self.autocast else xc.bpe, x.rg or w.rg))

    def mul(self, a: _T, b: _T, comp: str, out_numel: int | None = None) -> _T:
        if a.rg:
            self.save(b, comp)
        if b.rg:
            self.save(a, comp)
        out = self.new(out_numel or max(a.numel, b.numel), max(a.bpe, b.bpe), a.rg or b.rg)
        return self.op((a, b), out)

    def unary_saving_input(self, x: _T, comp: str) -> _T:
        if x.rg:
            self.save(x, comp)
        return self.op((x,), self.new(x.numel, x.bpe, x.rg))

    def unary_saving_output(self, x: _T, comp: str, bpe: int | None = None) -> _T:
        out = self.new(x.numel, bpe or x.bpe, x.rg)
        if x.rg:
            self.save(out, comp)
        return self.op((x,), out)

    def add(self, a: _T, b: _T) -> _T:
        return self.new(max(a.numel, b.numel), max(a.bpe, b.bpe), a.rg or b.rg)

    def matmul(self, a: _T, b: _T, out_numel: int, comp: str) -> _T:
        if self.autocast:
            a, b = self.cast(a, self.c), self.cast(b, self.c)
        if b.rg:
            self.save(a, comp)
        if a.rg:
            self.save(b, comp)
        return self.op((a, b), self.new(out_numel, max(a.bpe, b.bpe), a.rg or b.rg))


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivationBytes:
    """Bytes saved for backward by one forward pass, by where they are kept.

    ``first_layer`` and ``per_layer`` are one block's saved bytes (layer 0 and each of layers 1..L-1),
    ``by_component`` splits a typical block (``"attention/scores"``, ``"mlp/act"`` ...), ``shared`` are
    tensors made once and used by every block (rotary cos/sin), ``head`` the final norm and lm_head
    inputs, ``loss`` the cross-entropy's saved log-softmax (fp32 b*s*V) and labels, ``embedding`` the ids.
    With checkpointing, ``checkpoints`` holds the kept block inputs and ``per_layer`` is what one block
    holds while it is recomputed in the backward.
    """

    first_layer: int
    per_layer: int
    by_component: dict[str, int]
    first_by_component: dict[str, int]
    shared: int
    head: int
    loss: int
    embedding: int
    checkpoints: int
    n_layers: int
    segment: int  # blocks per checkpointed segment (0: no checkpointing; 1: every block)
    layer_input: int  # one block's input (b*s*h in the residual dtype): what a checkpoint keeps
    logits_bytes: int  # b*s*V in the logits' dtype (compute dtype)
    logits_fp32: int  # b*s*V*4: the upcast logits, the log-softmax output, and each of their grads
    backward_first: int = 0  # block 0's saved bytes + gradients alive at the widest op of its backward
    backward_per: int = 0  # the same for a typical block
    input_saved: int = 0  # bytes of a block's input that the block itself saves (a checkpoint aliases it)
    plain_blocks: int = 0  # every-k: blocks that are not checkpointed and keep all they save

    @property
    def layers(self) -> int:
        """Saved bytes of all blocks at the end of the forward."""
        if self.plain_blocks:
            return self.checkpoints + self.first_layer + (self.plain_blocks - 1) * self.per_layer
        if self.segment:
            return self.checkpoints
        return self.first_layer + (self.n_layers - 1) * self.per_layer

    @property
    def total(self) -> int:
        """Everything alive at the end of the forward that is not a weight: what the backward consumes."""
        return self.layers + self.shared + self.head + self.loss + self.embedding

    def breakdown(self) -> dict[str, int]:
        out = {f"activations/layer/{k}": v for k, v in self.by_component.items()}
        out["activations/layer/total"] = self.per_layer
        out["activations/layers"] = self.layers
        out["activations/shared"] = self.shared
        out["activations/head"] = self.head
        out["activations/loss"] = self.loss
        out["activations/embedding"] = self.embedding
        if self.segment:
            out["activations/checkpoints"] = self.checkpoints
        out["activations/total"] = self.total
        return out


def rule_of_thumb_activation_bytes(n_layers: int, batch: int, seq: int, hidden: int) -> int:
    """The lesson's rough figure for a bf16 block: L * b * s * h * 20 bytes.

    >>> rule_of_thumb_activation_bytes(24, 4, 2048, 2048)
    8053063680
    >>> rule_of_thumb_activation_bytes(32, 2, 4096, 4096)
    21474836480
    """
    for name, v in (("layers", n_layers), ("batch", batch), ("seq", seq), ("hidden", hidden)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise MemfitError(f"--{name} must be a positive integer, got {v!r}")
    return n_layers * batch * seq * hidden * 20


# ---- the block forward ---------------------------------------------------------------------------

class _Block:
    """One decoder block's forward, replayed on a context."""

    def __init__(self, shape: ModelShape, spec: RunSpec, ctx: _Ctx, lora: dict[str, Linear]):
        self.s, self.spec, self.ctx, self.lora = shape, spec, ctx, lora
        self.T = spec.batch * spec.seq
        full = spec.method == "full"
        wb = spec.weight_bytes
        self.wb = wb
        self.norm_w = _Param(shape.hidden, 4 if spec.method == "qlora" else wb, full)
        self.full = full

    # linear with an optional LoRA branch (PEFT's Linear.forward)
    def lin(self, x: _T, lin: Linear, comp: str, rows: int | None = None) -> _T:
        ctx, spec = self.ctx, self.spec
        rows = rows or self.T
        base_b = self.wb if spec.method != "qlora" else ctx.c
        w = _Param(lin.in_features * lin.out_features, base_b, self.full)
        if spec.method == "qlora":
            out = self._qlinear(x, lin, rows, comp)
        else:
            out = ctx.linear(x, rows * lin.out_features, w, comp)
        ad = self.lora.get(lin.path)
        if ad is None:
            return out
        r = lora_rank(ad, spec.rank)
        # PEFT 0.21.2 lora.Linear.forward: x = x.to(lora_A.weight.dtype) (fp32), then per adapter
        # lora_B(lora_A(dropout(x))) * scaling, added, .to(result dtype). Each adapted linear has its own
        # nn.Dropout and its own cast: q, k and v share nothing. lora_A saves the dropped copy.
        xa = ctx.cast(x, FP32)
        xa = self.dropout(xa, spec.lora_dropout, "lora/dropout")
        a_out = ctx.linear(xa, rows * r, _Param(r * lin.in_features, FP32, True), "lora/A")
        b_out = ctx.linear(a_out, rows * lin.out_features, _Param(r * lin.out_features, FP32, True), "lora/B")
        res = ctx.add(out, b_out)
        return ctx.cast(res, out.bpe) if not ctx.autocast else ctx.cast(res, out.bpe)

    def dropout(self, x: _T, p: float, comp: str) -> _T:
        """``F.dropout(x, p, training=True)`` (torch 2.13 ``at::dropout``): the identity for p == 0 (no op, no
        new tensor). For 0 < p < 1 a new output (x's numel, x's dtype: dropout is on no autocast list) and,
        when x requires grad, what the backward needs to rescale the gradient:

        - CUDA: the fused ``native_dropout`` kernel, which saves a bool mask, 1 B per element;
        - CPU: ``at::dropout`` takes the fused kernel only on CUDA/XPU/lazy devices; elsewhere it builds
          ``noise = empty_like(x).bernoulli_(1 - p).div_(1 - p)`` and returns ``x * noise``, so the multiply
          saves the noise, a tensor in x's dtype (4 B per element in fp32, 2 in bf16).

        The next op saves the dropped output, not x.

        Worked (b=2, s=16, h=64, fp32; tests/estimate/test_dropout.py): the residual dropout after an
        attention output projection keeps b*s*h*1 = 2,048 B on CUDA, b*s*h*4 = 8,192 B on CPU.
        """
        if p <= 0.0:
            return x
        ctx = self.ctx
        if x.rg:
            ctx.save(ctx.new(x.numel, 1 if self.spec.device == "cuda" else x.bpe, False), comp)
        return ctx.op((x,), ctx.new(x.numel, x.bpe, x.rg))

    def _qlinear(self, x: _T, lin: Linear, rows: int, comp: str) -> _T:
        """bitsandbytes Linear4bit: x.to(compute dtype); MatMul4Bit keeps only the 4-bit weight for the
        input gradient (a parameter), the dequantised weight is a transient."""
        ctx = self.ctx
        xc = ctx.cast(x, ctx.c)
        ctx.transient = max(ctx.transient, lin.in_features * lin.out_features * ctx.c)
        return ctx.new(rows * lin.out_features, ctx.c, xc.rg)

    def rmsnorm(self, x: _T, size: int, comp: str, *, gemma: bool = False) -> _T:
        ctx = self.ctx
        rows = x.numel // size
        x32 = ctx.cast(x, FP32)
        if x32.rg:
            ctx.save(x32, comp)
        r = ctx.new(rows, FP32, x.rg)
        if x.rg:
            ctx.save(r, comp)
        y32 = ctx.new(x.numel, FP32, x.rg)
        w = _Param(size, self.norm_w.bpe, self.norm_w.rg)
        if gemma:
            # output = _norm(x.float()) * (1.0 + weight.float()); output.type_as(x)
            w1 = ctx.new(size, FP32, w.rg)  # 1 + weight.float(): a fresh (size,) fp32 tensor
            out = ctx.mul(y32, w1, comp)
            return ctx.cast(out, x.bpe)
        y = ctx.cast(y32, x.bpe)
        wt = ctx.weight_tensor(_Param(size, w.bpe, w.rg)) if not ctx.autocast else _T(size, w.bpe, w.rg, -1)
        if wt.sid == -1:
            ctx.param_sids.add(-1)
        return ctx.mul(wt, y, comp, out_numel=y.numel)

    def layernorm(self, x: _T, comp: str) -> _T:
        ctx = self.ctx
        rows = x.numel // self.s.hidden
        if x.rg or self.full:
            ctx.save(x, comp)
            stat_b = FP32 if (self.spec.device == "cuda" or x.bpe == FP32) else x.bpe
            ctx.save(ctx.new(rows, stat_b, False), comp)
            ctx.save(ctx.new(rows, stat_b, False), comp)
        return ctx.new(x.numel, x.bpe, x.rg or self.full)

    def act(self, x: _T, comp: str) -> _T:
        ctx = self.ctx
        name = self.s.activation
        if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh_python"):
            # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
            if x.rg:
                ctx.save(x, comp)  # pow
            t = ctx.new(x.numel, x.bpe, x.rg)
            if x.rg:
                ctx.save(t, comp)  # tanh output
            half = ctx.new(x.numel, x.bpe, x.rg)
            one_t = ctx.new(x.numel, x.bpe, x.rg)
            return ctx.mul(half, one_t, comp)
        if name == "relu":
            return ctx.unary_saving_output(x, comp)  # threshold_backward reads the result
        return ctx.unary_saving_input(x, comp)

    # ---- attention kernels ----------------------------------------------------------------
    def attention_core(self, q: _T, k: _T, v: _T, comp: str = "attention") -> _T:
        """q: (b, a, s, d); k, v: (b, kv, s, d) -> output (b, s, a*d) contiguous."""
        ctx, s, spec = self.ctx, self.s, self.spec
        b, sq = spec.batch, spec.seq
        a, kv, d = s.n_heads, s.n_kv_heads, s.head_dim
        scores = b * a * sq * sq
        impl = spec.attention
        if impl == "eager":
            rep = a // kv
            if rep > 1 and s.model_type not in ("gpt2", "gpt_neox", "opt"):
                k = ctx.new(b * a * sq * d, k.bpe, k.rg)
                v = ctx.new(b * a * sq * d, v.bpe, v.rg)
            sc = ctx.matmul(q, k, scores, f"{comp}/qk")
            if s.attn_softcap:
                sc = ctx.new(scores, sc.bpe, sc.rg)  # / softcap
                sc = ctx.unary_saving_output(sc, f"{comp}/softcap")  # tanh
                sc = ctx.new(scores, sc.bpe, sc.rg)  # * softcap
            if s.model_type == "gpt2":
                # softmax(attn_weights, dim=-1) in the input dtype, except under autocast, which runs softmax in
                # fp32 (on CPU's and CUDA's fp32 lists); then .type(value.dtype) makes the bf16 copy
                p = ctx.unary_saving_output(sc, f"{comp}/scores", bpe=FP32 if ctx.autocast else None)
                p = ctx.cast(p, v.bpe)
            else:
                p32 = ctx.unary_saving_output(sc, f"{comp}/scores", bpe=FP32)  # softmax(dtype=fp32)
                p = ctx.cast(p32, q.bpe)  # .to(query.dtype)
            ctx.transient = max(ctx.transient, scores * FP32 + scores * sc.bpe)
            # F.dropout(attn_weights, p=dropout): its mask, and the product with v saves the dropped copy
            p = self.dropout(p, s.attention_dropout, f"{comp}/dropout")
            o = ctx.matmul(p, v, b * a * sq * d, f"{comp}/pv")
            out = ctx.new(b * sq * a * d, o.bpe, o.rg)  # transpose(1, 2).contiguous()
            return out
        # sdpa (flash / memory-efficient kernels) and flash-attention-2
        if ctx.autocast:
            q, k, v = ctx.cast(q, ctx.c), ctx.cast(k, ctx.c), ctx.cast(v, ctx.c)
        # transformers passes enable_gqa=True to sdpa when there is no mask and head_dim <= 256; otherwise
        # it repeats k and v to all heads (copies) before the call
        gqa_native = impl == "flash" or (not spec.padding_mask and d <= 256)
        repeated = a != kv and not gqa_native
        if repeated:
            k = ctx.new(b * a * sq * d, k.bpe, k.rg)
            v = ctx.new(b * a * sq * d, v.bpe, v.rg)
        if s.attention_dropout > 0.0 and impl == "sdpa" and spec.device == "cpu":
            return self._sdpa_math(q, k, v, comp, v_contiguous=repeated)
        # CUDA's flash and memory-efficient kernels apply dropout inside the kernel and recompute the mask in
        # the backward from the RNG seed and offset, which torch 2.13 keeps as two 0-d int64 *host* tensors
        # (``at::scalar_tensor(seed, at::dtype(at::kLong))`` in flash_api.cpp mha_fwd and in
        # ``_efficient_attention_forward``, outside CUDA-graph capture): no GPU bytes, whatever dropout_p is.
        rg = q.rg or k.rg or v.rg
        out = ctx.new(b * a * sq * d, q.bpe, rg)
        if rg:
            for t in (q, k, v, out):
                ctx.save(t, f"{comp}/kernel")
            if spec.padding_mask and impl == "sdpa":
                # the additive (b, 1, s, s) mask in the compute dtype, expanded per call and kept by the kernel
                ctx.save(ctx.new(b * sq * sq, ctx.c, False), f"{comp}/mask")
            lse = ctx.new(b * a * sq, FP32, False)
            ctx.save(lse, f"{comp}/kernel")
            ctx.op((q, k, v), out)
        # output is (b, a, s, d) -> transpose(1, 2).contiguous()? sdpa returns a (b, s, a, d) view; transformers
        # transposes it back and reshapes: for the CPU kernel the result is already contiguous in (b, s, a, d).
        return out.view(b * sq * a * d)

    def _sdpa_math(self, q: _T, k: _T, v: _T, comp: str, *, v_contiguous: bool) -> _T:
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
        """
        ctx, s, spec = self.ctx, self.s, self.spec
        b, sq, a, d = spec.batch, spec.seq, s.n_heads, s.head_dim
        n, scores = b * a * sq * d, b * a * sq * sq
        rg = q.rg or k.rg or v.rg
        qs = ctx.op((q,), ctx.new(n, FP32, q.rg))  # query_acc * scaling_factor
        ks = ctx.op((k,), ctx.new(n, FP32, k.rg))  # key_acc (repeat_interleave for GQA).transpose * scaling_factor
        if ks.rg:
            ctx.save(qs, f"{comp}/qk")
        if qs.rg:
            ctx.save(ks, f"{comp}/qk")
        sc = ctx.op((qs, ks), ctx.new(scores, FP32, rg))
        p = ctx.unary_saving_output(sc, f"{comp}/scores")
        p = self.dropout(p, s.attention_dropout, f"{comp}/dropout")
        math_repeat = s.n_heads != s.n_kv_heads and not v_contiguous  # enable_gqa: repeat_interleave inside
        if v.bpe == FP32 and not math_repeat and (v_contiguous or spec.batch == 1):
            vv = v  # a view of v's storage
        else:
            vv = ctx.new(n, FP32, v.rg)  # a contiguous fp32 copy
        if p.rg:
            ctx.save(vv, f"{comp}/pv")
        if vv.rg:
            ctx.save(p, f"{comp}/pv")
        o = ctx.op((p, vv), ctx.new(n, FP32, rg))
        return ctx.new(n, q.bpe, o.rg)

    def rope(self, x: _T, cos: _T, sin: _T, comp: str) -> _T:
        """x * cos + rotate_half(x) * sin (on the rotary slice; the rest is concatenated back)."""
        ctx = self.ctx
        frac = self.s.rotary_fraction
        if frac < 1.0:
            rot = x.view(int(x.numel * frac))  # x[..., :rotary_dim]
        else:
            rot = x
        a = ctx.mul(rot, cos, f"{comp}/rope", out_numel=rot.numel)
        rh = ctx.new(rot.numel, rot.bpe, rot.rg)  # cat(-x2, x1)
        bb = ctx.mul(rh, sin, f"{comp}/rope", out_numel=rot.numel)
        out = ctx.add(a, bb)
        if frac < 1.0:
            out = ctx.new(x.numel, out.bpe, out.rg)  # cat((rotated, pass), dim=-1)
        return out


def _lora_map(shape: ModelShape, spec: RunSpec) -> dict[str, Linear]:
    return {lin.path: lin for lin in adapted_linears(shape, spec)}


def _block_forward(shape: ModelShape, spec: RunSpec, ctx: _Ctx, x: _T, cos: _T | None, sin: _T | None,
                   lora: dict[str, Linear]) -> _T:
    """Replay one decoder block; returns the block output (the next block's input)."""
    blk = _Block(shape, spec, ctx, lora)
    lins = block_linears_by_path(shape)
    T, h, t = blk.T, shape.hidden, shape.model_type
    a, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim

    if t == "gpt2":
        n1 = blk.layernorm(x, "norm")
        qkv = blk.lin(n1, lins["attn.c_attn"], "attention/qkv")
        q = qkv.view(T * h)
        k = qkv.view(T * h)
        v = qkv.view(T * h)
        if spec.attention == "eager":
            # gpt2's eager path: matmul on views of the fused qkv output (transposes copy for bmm)
            q = ctx.new(T * h, qkv.bpe, qkv.rg)
            k = ctx.new(T * h, qkv.bpe, qkv.rg)
            v = ctx.new(T * h, qkv.bpe, qkv.rg)
        o = blk.attention_core(q, k, v)
        o = blk.lin(o, lins["attn.c_proj"], "attention/out")
        o = blk.dropout(o, shape.residual_dropout, "residual/dropout")  # attn.resid_dropout
        x = ctx.add(x, o)
        n2 = blk.layernorm(x, "norm")
        f = blk.lin(n2, lins["mlp.c_fc"], "mlp/up")
        f = blk.act(f, "mlp/act")
        f = blk.lin(f, lins["mlp.c_proj"], "mlp/down")
        f = blk.dropout(f, shape.residual_dropout, "residual/dropout")  # mlp.dropout
        return ctx.add(x, f)

    if t == "gpt_neox":
        n1 = blk.layernorm(x, "norm")
        qkv = blk.lin(n1, lins["attention.query_key_value"], "attention/qkv")
        q = qkv.view(T * h)
        k = qkv.view(T * h)
        v = qkv.view(T * h)
        assert cos is not None and sin is not None
        q = blk.rope(q, cos, sin, "attention")
        k = blk.rope(k, cos, sin, "attention")
        o = blk.attention_core(q, k, v)
        o = blk.lin(o, lins["attention.dense"], "attention/out")
        o = blk.dropout(o, shape.residual_dropout, "residual/dropout")  # post_attention_dropout
        if shape.parallel_residual:
            n2 = blk.layernorm(x, "norm")
        else:
            x = ctx.add(x, o)
            n2 = blk.layernorm(x, "norm")
        f = blk.lin(n2, lins["mlp.dense_h_to_4h"], "mlp/up")
        f = blk.act(f, "mlp/act")
        f = blk.lin(f, lins["mlp.dense_4h_to_h"], "mlp/down")
        f = blk.dropout(f, shape.residual_dropout, "residual/dropout")  # post_mlp_dropout
        if shape.parallel_residual:
            return ctx.add(ctx.add(o, f), x)
        return ctx.add(x, f)

    if t == "opt":
        n1 = blk.layernorm(x, "norm")
        q = blk.lin(n1, lins["self_attn.q_proj"], "attention/q")
        q = ctx.new(q.numel, q.bpe, q.rg)  # q * scaling (OPT scales the query)
        k = blk.lin(n1, lins["self_attn.k_proj"], "attention/k")
        v = blk.lin(n1, lins["self_attn.v_proj"], "attention/v")
        o = blk.attention_core(q, k, v)
        o = blk.lin(o, lins["self_attn.out_proj"], "attention/out")
        o = blk.dropout(o, shape.residual_dropout, "residual/dropout")  # F.dropout(p=config.dropout)
        x = ctx.add(x, o)
        n2 = blk.layernorm(x, "norm")
        f = blk.lin(n2, lins["fc1"], "mlp/up")
        f = blk.act(f, "mlp/act")
        f = blk.lin(f, lins["fc2"], "mlp/down")
        f = blk.dropout(f, shape.residual_dropout, "residual/dropout")
        return ctx.add(x, f)

    # rotary / RMSNorm / gated-MLP families
    gemma = t in ("gemma", "gemma2")
    n1 = blk.rmsnorm(x, h, "norm", gemma=gemma)
    if t == "phi3":
        qkv = blk.lin(n1, lins["self_attn.qkv_proj"], "attention/qkv")
        q = qkv.view(T * a * d)
        k = qkv.view(T * kv * d)
        v = qkv.view(T * kv * d)
    else:
        q = blk.lin(n1, lins["self_attn.q_proj"], "attention/q")
        k = blk.lin(n1, lins["self_attn.k_proj"], "attention/k")
        v = blk.lin(n1, lins["self_attn.v_proj"], "attention/v")
    if shape.qk_norm:
        q = blk.rmsnorm(q, d, "attention/qk_norm")
        k = blk.rmsnorm(k, d, "attention/qk_norm")
    assert cos is not None and sin is not None
    q = blk.rope(q, cos, sin, "attention")
    k = blk.rope(k, cos, sin, "attention")
    o = blk.attention_core(q, k, v)
    o = blk.lin(o, lins["self_attn.o_proj"], "attention/out")
    o = blk.dropout(o, shape.residual_dropout, "residual/dropout")  # phi3: resid_attn_dropout
    if shape.sandwich_norms:
        o = blk.rmsnorm(o, h, "norm", gemma=gemma)
    x = ctx.add(x, o)
    n2 = blk.rmsnorm(x, h, "norm", gemma=gemma)
    if shape.is_moe:
        f = _moe(blk, n2, lins, lora)
    elif t == "phi3":
        gu = blk.lin(n2, lins["mlp.gate_up_proj"], "mlp/gate_up")
        gate = gu.view(T * shape.intermediate)
        up = gu.view(T * shape.intermediate)
        g = blk.act(gate, "mlp/act")
        f = ctx.mul(up, g, "mlp/mul")
        f = blk.lin(f, lins["mlp.down_proj"], "mlp/down")
    else:
        g = blk.lin(n2, lins["mlp.gate_proj"], "mlp/gate")
        g = blk.act(g, "mlp/act")
        u = blk.lin(n2, lins["mlp.up_proj"], "mlp/up")
        f = ctx.mul(g, u, "mlp/mul")
        f = blk.lin(f, lins["mlp.down_proj"], "mlp/down")
    f = blk.dropout(f, shape.residual_dropout, "residual/dropout")  # phi3: resid_mlp_dropout
    if shape.sandwich_norms:
        f = blk.rmsnorm(f, h, "norm", gemma=gemma)
    return ctx.add(x, f)


def _moe(blk: _Block, x: _T, lins: dict[str, Linear], lora: dict[str, Linear]) -> _T:
    """Mixtral's sparse MoE block as transformers 5 runs it (router, then each expert on its tokens).

    Rows routed to experts: T*k in all (k = experts per token); the saved tensors are per routed row.
    With ``--targets all-linear`` PEFT also adapts the router weight and the two fused expert parameters
    (see :func:`_expert_effective_weight` and :func:`_router_logits`).
    """
    ctx, s = blk.ctx, blk.s
    T, h, i, k = blk.T, s.hidden, s.intermediate, s.experts_per_token
    Tk = T * k
    router = lins["mlp.gate"]
    if router.path in lora:
        logits = _router_logits(blk, x, router, lora[router.path])
    else:
        logits = blk.lin(x, router, "moe/router")
    probs = ctx.unary_saving_output(ctx.cast(logits, FP32), "moe/router", bpe=FP32)
    idx = ctx.new(T * k, INT64, False)
    if probs.rg:
        ctx.save(idx, "moe/router")
        top = ctx.new(T * k, FP32, True)
        ssum = ctx.new(T, FP32, True)
        ctx.save(ssum, "moe/router")
        ctx.save(top, "moe/router")
    # dispatch bookkeeping (sorted token ids, expert offsets)
    for _ in range(2):
        ctx.save(ctx.new(Tk, INT64, False), "moe/dispatch")
    gu_lin, down_lin = lins["mlp.experts.gate_up_proj"], lins["mlp.experts.down_proj"]
    if gu_lin.path in lora and down_lin.path in lora:
        return _moe_adapted_experts(blk, x, gu_lin, down_lin, lora)
    gathered = ctx.new(Tk * h, x.bpe, x.rg)
    gu = blk.lin(gathered, gu_lin, "moe/gate_up", rows=Tk)
    gate = gu.view(Tk * i)
    up = gu.view(Tk * i)
    g = blk.act(gate, "moe/act")
    f = ctx.mul(g, up, "moe/mul")
    f = blk.lin(f, down_lin, "moe/down", rows=Tk)
    w = ctx.new(Tk, FP32, True)
    f = ctx.mul(f, w, "moe/weights", out_numel=Tk * h)
    ctx.save(ctx.new(Tk, INT64, False), "moe/dispatch")
    return ctx.new(T * h, x.bpe, f.rg)


def _router_logits(blk: _Block, x: _T, router: Linear, ad: Linear) -> _T:
    """The router ``F.linear(x, W)`` with W adapted by PEFT's ``ParamWrapper`` (a 2-D parameter, one expert).

    PEFT registers a parametrization: the effective weight ``W + (B @ A) * scaling`` (E x h, in the weight
    dtype; B @ A runs on the fp32 adapters, under autocast on their bf16 copies, which it saves) replaces W
    for the forward. The effective weight requires grad, so the linear saves its input x (b*s*h) as well
    as the weight (E*h, its autocast copy under mixed precision).
    """
    ctx, spec, s = blk.ctx, blk.spec, blk.s
    E, h = s.n_experts, s.hidden
    r = lora_rank(ad, spec.rank)
    a = ctx.weight_tensor(_Param(r * h, FP32, True))
    b = ctx.weight_tensor(_Param(E * r, FP32, True))
    ctx.matmul(b, a, E * h, "moe/router/lora")  # delta = B @ A, then W + delta.to(W.dtype)
    w_eff = ctx.new(E * h, _expert_bytes(blk), True)  # W + delta.to(W.dtype)
    xc = ctx.cast(x, ctx.c) if ctx.autocast else x
    wc = ctx.cast(w_eff, ctx.c) if ctx.autocast else w_eff
    ctx.save(xc, "moe/router")
    if xc.rg:
        ctx.save(wc, "moe/router/effective_weight")
    return ctx.op((xc, wc), ctx.new(blk.T * E, wc.bpe, True))


def _expert_bytes(blk: _Block) -> int:
    """Bytes per element of the expert weights as the experts run: the weight dtype. Under mixed precision
    the fp32 experts run in fp32 (transformers' grouped_mm casts the input to the weight's dtype)."""
    return blk.ctx.c if blk.spec.method == "qlora" else blk.wb


def _expert_effective_weight(blk: _Block, lin: Linear, ad: Linear, comp: str, pending: int) -> _T:
    """PEFT's ``ParamWrapper`` on a fused 3-D expert parameter W (E, out, in): the effective weight.

    With one adapter and several experts PEFT folds the update with ``_LoraFactorsProxy``:
    ``W_eff = baddbmm(W, lhs, rhs, alpha=scaling)`` with lhs (E, out, r') and rhs (E, r', in) the fp32
    adapters reshaped and cast to W's dtype (r' = r, 2r for gate_up), autocast off. W_eff is a new
    E*out*in tensor in W's dtype that requires grad, made once per forward (``parametrize.cached()``) and
    kept by the expert matmuls until their backward. baddbmm saves lhs and rhs: copies of the adapters,
    E*r'*(in + out) elements in W's dtype, when that is not fp32 (else views of the adapters themselves).
    Its backward takes the gradient of W_eff (E*out*in again); ``pending``: the block's adapter gradient
    bytes that do not exist yet when it runs (see :func:`_moe_adapted_experts`).
    """
    ctx, spec = blk.ctx, blk.spec
    eb = _expert_bytes(blk)
    r = lora_rank(ad, spec.rank)
    factors = []
    for n in (r * lin.out_features, r * lin.in_features):
        f = ctx.new(n, eb, True)
        if eb == FP32:
            ctx.param_sids.add(f.sid)  # a view of the fp32 adapter weight
        ctx.save(f, comp + "/lora_factors")
        factors.append(f)
    w_eff = ctx.new(lin.weight_numel, eb, True)
    ctx.events.append((ctx.saved_total, w_eff.nbytes + sum(f.nbytes for f in factors) - pending))
    return w_eff


def _expert_matmul(ctx: _Ctx, x: _T, w: _T, out_numel: int, comp: str) -> tuple[_T, _T]:
    """``x @ W_eff`` per expert (grouped_mm, or the eager loop's per-expert ``F.linear`` on ``W_eff[e]``):
    saves the rows x (W_eff requires grad) and W_eff (a view keeps the whole E*out*in storage). Under
    autocast (mixed precision, eager loop) F.linear casts each ``W_eff[e]`` and the rows to bf16 and saves
    those copies (E*out*in in bf16 over the experts) instead; the fp32 W_eff is then not kept.
    Returns the output and the weight as saved."""
    if ctx.autocast:
        xe, we = ctx.cast(x, ctx.c), ctx.new(w.numel, ctx.c, True)
    else:
        xe, we = ctx.cast(x, w.bpe), w
    ctx.save(xe, comp)
    if xe.rg:
        ctx.save(we, comp + "/effective_weight")
    return ctx.new(out_numel, we.bpe, True), we


def _moe_adapted_experts(blk: _Block, x: _T, gu_lin: Linear, down_lin: Linear, lora: dict[str, Linear]) -> _T:
    """The experts with both fused parameters adapted (PEFT ``ParamWrapper``, see
    :func:`_expert_effective_weight`), in the expert dtype (fp32 under mixed precision).

    Saved per block, beyond the plain experts' per-row tensors (Tk = b*s*k routed rows):
    W_eff(gate_up) E*2i*h + W_eff(down) E*h*i, the rows' inputs to both matmuls (Tk*h and Tk*i, now
    saved because the weight requires grad), and the bf16 adapter copies of the factors.

    Backward: bf16 runs one grouped matmul whose backward makes the gradient of the whole W_eff at once
    (E*out*in). fp32 and mixed-bf16 (fp32 weights) run transformers' eager per-expert loop: the backward of each
    ``W_eff[e]`` (a select) is a zero-filled E*out*in tensor, added out of place to the gradient
    accumulated from the other experts, so while the gate_up rows of an expert other than the last run
    backward, three E*2i*h tensors (accumulated, new, their sum) and the accumulated E*h*i gradient of
    down are alive beside everything the block saved::

        grouped:  saved(up to the matmul) + Tk*(in + out) + E*out*in - G(not made yet)    (per matmul)
        eager:    saved(block) - (E-2)/E * rows + Tk*(h + 2i) + 3 * E*2i*h + E*h*i - G(block)   (fp32 weights)

    where rows are the expert loop's per-row saved tensors (the rows spread evenly over the E experts;
    the E-2 experts whose backward ran before have freed theirs) and G(block) the block's adapter
    gradients, which the budget's block moments count but which do not exist yet while the expert rows
    run backward (the adapters' own backward comes after).

    Worked (h=256, i=896, E=8, fp32): 3 * 14,680,064 + 7,340,032 = 51,380,224 B of expert-weight
    gradients at once.

    Every expert is assumed to receive rows. Under mixed precision the eager loop saves one bf16 copy per
    expert that has rows, so where a router (e.g. a randomly initialised one) sends a short batch to only
    some experts, fewer copies are kept and the estimate is above the real step.
    """
    ctx, s, spec = blk.ctx, blk.s, blk.spec
    T, h, i, k = blk.T, s.hidden, s.intermediate, s.experts_per_token
    Tk = T * k
    eager = spec.precision != "bf16"  # grouped_mm takes bf16 weights only: memfit.runtime.build._experts_kwargs
    # the experts are the block's last trained ops: when their backward runs, none of the block's adapter
    # gradients exists yet but down's (made by its baddbmm, which runs right after down's matmul), while
    # the budget's block moments count them all: each event takes out those not made yet
    g_block = lora_params_per_layer(s, spec) * FP32
    g_down = lora_linear_params(down_lin, spec.rank) * FP32
    w_gu = _expert_effective_weight(blk, gu_lin, lora[gu_lin.path], "moe/gate_up", g_block - g_down)
    rows_start = ctx.saved_total
    gathered = ctx.new(Tk * h, x.bpe, x.rg)
    gu, wc_gu = _expert_matmul(ctx, gathered, w_gu, Tk * 2 * i, "moe/gate_up")
    rows_in = Tk * h * wc_gu.bpe
    if not eager:
        ctx.events.append((ctx.saved_total, gu.nbytes + rows_in + w_gu.nbytes - (g_block - g_down)))
    gate = gu.view(Tk * i)
    up = gu.view(Tk * i)
    n_ev = len(ctx.events)
    g = blk.act(gate, "moe/act")
    f = ctx.mul(g, up, "moe/mul")
    ctx.events[n_ev:] = [(saved, grads - (g_block - g_down)) for saved, grads in ctx.events[n_ev:]]
    w_d = _expert_effective_weight(blk, down_lin, lora[down_lin.path], "moe/down", g_block)
    f, wc_d = _expert_matmul(ctx, f, w_d, Tk * h, "moe/down")
    if not eager:
        ctx.events.append((ctx.saved_total, f.nbytes + Tk * i * w_d.bpe + w_d.nbytes - g_block))
    w = ctx.new(Tk, FP32, True)
    n_ev = len(ctx.events)
    f = ctx.mul(f, w, "moe/weights", out_numel=Tk * h)
    ctx.events[n_ev:] = [(saved, grads - g_block) for saved, grads in ctx.events[n_ev:]]
    ctx.save(ctx.new(Tk, INT64, False), "moe/dispatch")
    if eager:
        # the experts after the second-to-last have run backward: their rows' saved tensors are gone
        E = s.n_experts
        rows_saved = ctx.saved_total - rows_start - sum(t.nbytes for t in (wc_gu, wc_d) if t.sid in ctx.saved)
        alive = ctx.saved_total - rows_saved * (E - 2) // E
        ctx.events.append((alive, gu.nbytes + rows_in + 3 * w_gu.nbytes + w_d.nbytes - g_block))
    return ctx.new(T * h, x.bpe, f.rg)


def _by_comp(saved: dict[int, tuple[int, str]], skip: set[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sid, (n, comp) in saved.items():
        if sid in skip:
            continue
        out[comp] = out.get(comp, 0) + n
    return out


def estimate_activations(shape: ModelShape, spec: RunSpec) -> ActivationBytes:
    """Saved-for-backward bytes of one forward of ``shape`` under ``spec``; see the module docstring."""
    if shape.model_type == "gemma2" and spec.attention == "sdpa":
        raise MemfitError("gemma2 has no sdpa path in transformers (its attention soft-capping needs the "
                          "scores): pass --attention eager (or flash on CUDA)")
    if shape.position == "learned" and spec.seq > shape.max_positions:
        raise MemfitError(f"{shape.name} has {shape.max_positions:,} learned positions; --seq {spec.seq:,} "
                          f"exceeds them: use --seq {shape.max_positions} or less")
    autocast = spec.is_mixed
    c = spec.compute_bytes
    ctx = _Ctx(spec=spec, shape=shape, autocast=autocast, c=c)
    lora = _lora_map(shape, spec)
    wrapped = sorted({lin.name for lin in lora.values() if not lin.is_nn_linear})
    if spec.lora_dropout > 0.0 and wrapped:
        # peft 0.21.2 ParamWrapper.update_layer: "does not work with lora_dropout != 0" (a ValueError)
        raise MemfitError(f"PEFT cannot apply LoRA dropout to {', '.join(wrapped)} ({shape.model_type}'s router / "
                          "fused experts, which --targets all-linear adapts through ParamWrapper): pass "
                          "--lora-dropout 0, or name the attention projections in --targets (e.g. q_proj,v_proj)")
    T, h, V = spec.batch * spec.seq, shape.hidden, shape.vocab
    full = spec.method == "full"
    embed_trained = full or any(m.role == "embed" for m in saved_modules(shape, spec))
    resid_b = FP32 if spec.method == "qlora" else spec.weight_bytes  # embedding output dtype

    # embeddings: the ids are saved when the table is trained
    ids = ctx.new(T, INT64, False)
    if embed_trained:
        ctx.save(ids, "embedding")
    x = ctx.new(T * shape.embed_dim, resid_b, embed_trained)
    if shape.position == "learned":
        # GPT-2 builds position ids as (1, s); OPT as (b, s) from the attention mask
        pos_ids = ctx.new(spec.seq * (spec.batch if shape.model_type == "opt" else 1), INT64, False)
        if embed_trained:
            ctx.save(pos_ids, "embedding")
        x = ctx.add(x, ctx.new(spec.seq * h, resid_b, embed_trained))
    if shape.model_type == "gemma" or shape.model_type == "gemma2":
        # hidden_states * normalizer (a 0-dim tensor in the embedding dtype)
        x = ctx.mul(x, ctx.new(1, resid_b, False), "embedding")
    # GPT-2's transformer.drop, GPT-NeoX's emb_dropout. It saves its mask when the embedding output requires
    # grad: a trained table, or an adapter run with checkpointing, where PEFT (and memfit.measure) call
    # enable_input_require_grads() (the blocks are replayed as before: block 0 with a frozen input).
    if shape.embedding_dropout > 0.0:
        grad_in = x.rg or (spec.is_adapter and spec.checkpointing != "none")
        dropped = _Block(shape, spec, ctx, {}).dropout(_T(x.numel, x.bpe, grad_in, x.sid, x.sbytes),
                                                       shape.embedding_dropout, "embedding")
        x = _T(dropped.numel, dropped.bpe, x.rg, dropped.sid)
    emb_saved = sum(n for n, _ in ctx.saved.values())
    emb_sids = set(ctx.saved)

    cos = sin = None
    if shape.position == "rotary":
        rot_d = int(shape.head_dim * shape.rotary_fraction)
        cos = ctx.new(spec.seq * rot_d, resid_b, False)  # (1, s, d): position_ids has batch 1
        sin = ctx.new(spec.seq * rot_d, resid_b, False)

    before = set(ctx.saved)
    ev0, sv0 = len(ctx.events), ctx.saved_total
    x1 = _block_forward(shape, spec, ctx, x, cos, sin, lora)
    bwd_first = _backward_peak(ctx.events[ev0:], sv0)
    first_sids = set(ctx.saved) - before
    shared_sids = {sid for sid in first_sids if cos is not None and sid in (cos.sid, sin.sid if sin else -1)}
    first_by = _by_comp({k: v for k, v in ctx.saved.items() if k in first_sids}, shared_sids)
    first = sum(first_by.values())
    shared = sum(ctx.saved[s][0] for s in shared_sids)

    if shape.n_layers > 1:
        before = set(ctx.saved)
        ev1, sv1 = len(ctx.events), ctx.saved_total
        x2 = _block_forward(shape, spec, ctx, x1, cos, sin, lora)
        bwd_per = _backward_peak(ctx.events[ev1:], sv1)
        input_saved = ctx.saved[x1.sid][0] if x1.sid in per_sids_of(ctx, before) else 0
        per_sids = set(ctx.saved) - before
        per_by = _by_comp({k: v for k, v in ctx.saved.items() if k in per_sids}, shared_sids)
        per = sum(per_by.values())
        if cos is not None and not shared:
            # a frozen first block may not save cos/sin; later blocks do
            new_shared = {sid for sid in per_sids if sid in (cos.sid, sin.sid if sin else -1)}
            shared_sids |= new_shared
            shared = sum(ctx.saved[s][0] for s in new_shared)
            per_by = _by_comp({k: v for k, v in ctx.saved.items() if k in per_sids}, shared_sids)
            per = sum(per_by.values())
        x_last = x2
    else:
        per, per_by, x_last = first, first_by, x1
        bwd_per = bwd_first
        input_saved = ctx.saved[x.sid][0] if x.sid in first_sids else 0

    # final norm and lm_head
    before = set(ctx.saved)
    blk = _Block(shape, spec, ctx, {})
    if shape.final_norm:
        if shape.norm == "rmsnorm":
            xf = blk.rmsnorm(x_last, h, "head", gemma=shape.model_type in ("gemma", "gemma2"))
        else:
            xf = blk.layernorm(x_last, "head")
    else:
        xf = x_last
    head_trained = full or any(m.role == "head" for m in saved_modules(shape, spec))
    lm_bpe = FP32 if spec.method == "qlora" else spec.weight_bytes
    if spec.loss == "chunked":
        # fused linear cross-entropy (Liger's LigerFusedLinearCrossEntropyLoss): the forward walks the
        # tokens in chunks of C rows, computes each chunk's logits and their gradient at once, and keeps
        # only d(hidden) (b*s*h) and d(lm_head weight) (V*h, when trained) for the backward; the fp32
        # chunk logits and their gradient (2 x C*V*4) are transient.
        # C = next_pow2(ceil(b*s / ceil(V / h))).
        head = sum(ctx.saved[s][0] for s in set(ctx.saved) - before)
        inc = -(-V // shape.embed_dim)
        rows = -(-T // inc)
        chunk = 1
        while chunk < rows:
            chunk *= 2
        chunk = min(chunk, T)
        loss = T * shape.embed_dim * xf.bpe + (V * shape.embed_dim * lm_bpe if head_trained else 0) + T * INT64
        logits_bytes = 0
        logits_fp32 = chunk * V * FP32
    else:
        lm_w = _Param(V * shape.embed_dim, lm_bpe, head_trained)
        logits = ctx.linear(xf, T * V, lm_w, "head")
        if shape.final_softcap:
            logits = ctx.new(T * V, logits.bpe, logits.rg)  # / cap
            logits = ctx.unary_saving_output(logits, "head")  # tanh
            logits = ctx.new(T * V, logits.bpe, logits.rg)  # * cap
        head_sids = set(ctx.saved) - before
        head = sum(ctx.saved[s][0] for s in head_sids)
        # loss: logits.float(); cross_entropy = log_softmax (saves output) + nll_loss (saves labels)
        loss = T * V * FP32 + T * INT64 + FP32
        logits_bytes = T * V * logits.bpe
        logits_fp32 = T * V * FP32

    layer_input = T * h * x1.bpe
    n = shape.n_layers
    seg = checkpoint_segment(spec, n)
    checkpoints = 0
    plain = 0
    if seg:
        kept = -(-n // seg)
        if spec.checkpointing == "every-k":
            # one block in k is checkpointed (torchtitan's / torchtune's selective "every k-th layer"):
            # blocks k, 2k, ... keep only their input; the others keep everything they save
            kept = n // spec.checkpoint_every
            plain = n - kept
        checkpoints = 0 if spec.offload else kept * layer_input
        if spec.attention == "eager" or (spec.padding_mask and spec.attention == "sdpa"):
            # the (b, 1, s, s) attention mask is an argument of every checkpointed block: kept to the end
            masks = 2 if shape.sliding_window and shape.model_type == "gemma2" else 1
            checkpoints += masks * spec.batch * spec.seq * spec.seq * resid_b
    return ActivationBytes(
        first_layer=first, per_layer=per, by_component=per_by, first_by_component=first_by, shared=shared,
        head=head, loss=loss, embedding=emb_saved if emb_sids else 0, checkpoints=checkpoints,
        n_layers=n, segment=seg, layer_input=layer_input, logits_bytes=logits_bytes,
        logits_fp32=logits_fp32, backward_first=max(first, bwd_first), backward_per=max(per, bwd_per),
        input_saved=input_saved, plain_blocks=plain,
    )


def per_sids_of(ctx: _Ctx, before: set[int]) -> set[int]:
    return set(ctx.saved) - before


def _backward_peak(events: list[tuple[int, int]], start: int) -> int:
    """Replay a block's backward in reverse: when op j's backward runs, the tensors saved by ops 0..j are
    still alive and the gradients of op j's output and inputs are allocated; the widest such moment."""
    return max((saved - start + grads for saved, grads in events), default=0)


def checkpoint_segment(spec: RunSpec, n_layers: int) -> int:
    """Blocks per checkpointed segment: 0 without checkpointing, 1 for ``full`` (transformers checkpoints
    every decoder layer) and for the checkpointed blocks of ``every-k`` (one block in k, the others not
    checkpointed; 0 when k > L), ceil(sqrt(L)) for ``sqrt`` (Chen et al. 2016, section 4).

    A segment keeps only its input (b*s*h) through the forward; the backward recomputes one segment at a
    time, so the recompute holds ``segment`` blocks' activations at once.
    """
    if spec.checkpointing == "none":
        return 0
    if spec.checkpointing == "full":
        return 1
    if spec.checkpointing == "every-k":
        return 1 if spec.checkpoint_every <= n_layers else 0
    k = 1
    while k * k < n_layers:
        k += 1
    return k
