"""A sparse mixture-of-experts MLP (``BlockLayout.moe``) as transformers 5 runs it: the router, then each
expert on its tokens; and the experts with PEFT's ``ParamWrapper`` adapters (``--targets all-linear``).

Rows routed to experts: Tk = b*s*k in all (k = experts per token); the saved tensors are per routed row.
Every expert is assumed to receive rows.
"""

from __future__ import annotations

from memfit.estimate.activations import ops
from memfit.estimate.activations.ops import Replay
from memfit.estimate.activations.tape import SymTensor
from memfit.estimate.block_parts import Linear, LinearRole
from memfit.estimate.constants import FP32_BYTES, INT64_BYTES
from memfit.estimate.lora import lora_linear_params, lora_params_per_layer, lora_rank, rank_of


def moe_mlp(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear]) -> SymTensor:
    """Mixtral's sparse MoE block (``softmax_topk_renorm`` router): x (b, s, h) -> (b, s, h).

    Router: logits (b, s, E), softmax in fp32 (saved), top-k indices (Tk int64) and weights, renormalised
    by their sum (both saved when the router trains); dispatch bookkeeping: sorted token ids and expert
    offsets (2 x Tk int64) and the inverse permutation (Tk int64). Experts: gate_up on the gathered rows
    (Tk, h) -> (Tk, 2i), act(gate) * up, down -> (Tk, h), times the routing weights (Tk, 1).
    """
    t, m = rp.tape, rp.model
    Tk, h = rp.batch * rp.seq * m.experts_per_token, m.hidden
    router = lins["router"]
    moe_layout = m.layout.moe
    sigmoid = moe_layout is not None and moe_layout.router == "sigmoid_group_topk"
    x_router = t.cast(x, FP32_BYTES) if sigmoid else x  # DeepSeek: F.linear(x.type(float32), W.type(float32))
    if router.path in rp.adapted:
        logits = _router_logits(rp, x_router, router)
    elif sigmoid:  # the router weight is kept fp32 (_keep_in_fp32_modules_strict) whatever the model's dtype
        logits = t.linear(x_router, t.weight((m.n_experts, h), FP32_BYTES, rp.full), m.n_experts, "moe/router")
    else:
        logits = ops.linear(rp, x, router, "moe/router")
    if sigmoid:
        probs = t.unary_saving_output(logits, "moe/router")  # sigmoid
    elif moe_layout is not None and moe_layout.router == "topk_softmax":
        # GPT-OSS: topk of the logits (its indices), softmax over the k in the logits' dtype (its output)
        if logits.requires_grad:
            t.save(t.new((Tk,), INT64_BYTES, False), "moe/router")
            t.save(t.new((Tk,), logits.itemsize, True), "moe/router")
        probs = logits
    else:
        probs = t.unary_saving_output(t.cast(logits, FP32_BYTES), "moe/router", FP32_BYTES)  # softmax(fp32)
    top_index = t.new((Tk,), INT64_BYTES, False)
    if probs.requires_grad and probs is not logits:
        t.save(top_index, "moe/router")
        if m.router_renorm:  # top /= top.sum(-1, keepdim=True)
            top = t.new((Tk,), probs.itemsize, True)
            t.save(t.new((rp.batch * rp.seq, 1), probs.itemsize, True), "moe/router")  # the sum the top-k divide by
            t.save(top, "moe/router")
    weights = _routing_weights(rp, logits)
    for _ in range(2):  # sorted token ids, expert offsets
        t.save(t.new((Tk,), INT64_BYTES, False), "moe/dispatch")
    gate_up, down = lins["experts_gate_up"], lins["experts_down"]
    if gate_up.path in rp.adapted and down.path in rp.adapted:
        return _with_shared(rp, x, lins, _adapted_experts(rp, x, gate_up, down, weights))
    gathered = t.new((Tk, h), x.itemsize, x.requires_grad)
    gu = ops.linear(rp, gathered, gate_up, "moe/gate_up")  # (Tk, 2i)
    _autocast_expert_copies(rp, gathered, gate_up, "moe/gate_up")
    f = _gate(rp, gu)
    _autocast_expert_copies(rp, f, down, "moe/down")
    f = ops.linear(rp, f, down, "moe/down")  # (Tk, h)
    f = t.mul(f, weights, "moe/weights")
    if _eager_loop(rp):
        _eager_index_add(rp, x)
    else:
        t.save(t.new((Tk,), INT64_BYTES, False), "moe/dispatch")
        if moe_layout is not None and moe_layout.bias and rp.full:
            # grouped path: gate_up_proj_bias[expert_ids_g] and down_proj_bias[...] index trained biases with the
            # sorted expert ids (Tk,) int64, one storage, which the index backward keeps
            t.save(t.new((Tk,), INT64_BYTES, False), "moe/dispatch")
    return _with_shared(rp, x, lins, t.new((rp.batch, rp.seq, h), x.itemsize, f.requires_grad))


def _with_shared(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear], routed: SymTensor) -> SymTensor:
    """The routed experts' output plus the shared experts' (``MoeLayout.shared_experts``: DeepSeek's
    ``shared_experts(residuals)``, a gated MLP of ``ModelShape.shared_intermediate`` on the MoE block's input)."""
    if not rp.model.shared_intermediate:
        return routed
    t = rp.tape
    g = ops.activation(rp, ops.linear(rp, x, lins["shared_gate"], "moe/shared/gate"), "moe/shared/act")
    f = t.mul(g, ops.linear(rp, x, lins["shared_up"], "moe/shared/up"), "moe/shared/mul")
    return t.add(routed, ops.linear(rp, f, lins["shared_down"], "moe/shared/down"))


def _gate(rp: Replay, gu: SymTensor, *, pending: int = 0) -> SymTensor:
    """The experts' gate on the gate_up output (Tk, 2i) -> (Tk, i) (``MoeLayout.gate``): SwiGLU ``act(gate) * up``
    (gate and up views of gu: act saves gu's storage, the product act(gate)), or GPT-OSS's clamped SwiGLU, which
    keeps gu (both clamps' input) and four (Tk, i) tensors: the clamped gate and the sigmoid (their product), up + 1
    and the glu (the final product)."""
    t, m = rp.tape, rp.model
    Tk, i = gu.shape[0], m.intermediate
    moe_layout = m.layout.moe
    if moe_layout is None or moe_layout.gate == "swiglu":
        g = ops.activation(rp, gu.view(Tk, i), "moe/act", pending=pending)
        return t.mul(g, gu.view(Tk, i), "moe/mul", pending=pending)
    if gu.requires_grad:
        t.save(gu, "moe/act")  # gate.clamp(max=l), up.clamp(-l, l): each saves its input, a view of gu
    gate = t.op((gu,), t.new((Tk, i), gu.itemsize, gu.requires_grad), pending=pending)
    sig = t.unary_saving_output(t.new((Tk, i), gu.itemsize, gu.requires_grad), "moe/act", pending=pending)
    glu = t.mul(gate, sig, "moe/act", pending=pending)
    up1 = t.new((Tk, i), gu.itemsize, gu.requires_grad)  # up.clamp(...) + 1
    return t.mul(up1, glu, "moe/mul", pending=pending)


def _autocast_expert_copies(rp: Replay, rows: SymTensor, lin: Linear, component: str) -> None:
    """Under autocast the eager loop's ``F.linear(rows, W[e])`` casts each expert's weight to the compute dtype
    and saves that copy when the rows require grad: E copies of (out, in) over the loop, where
    :func:`~memfit.estimate.activations.ops.linear` counted one; the other E - 1 here (every expert assumed to
    receive rows). Worked (E=4, i=128, h=64, bf16): gate_up 3 x 2*128*64*2 = 98,304 B, down 3 x 128*64*2 =
    49,152 B more per block: the -37% a tiny Mixtral / Qwen3-MoE LoRA mixed-bf16 step showed on saved bytes."""
    t = rp.tape
    if not (t.autocast and _eager_loop(rp) and rows.requires_grad and not rp.spec.is_quantised):
        return
    for _ in range(lin.experts - 1):
        t.save(t.new((lin.out_features, lin.in_features), t.compute_itemsize, rp.full), component + "/weight_copy")


def _routing_weights(rp: Replay, logits: SymTensor) -> SymTensor:
    """The routed rows' weights (Tk, 1) as the experts multiply them: fp32 (Mixtral), or cast back to the router
    logits' dtype (``MoeLayout.weights_in_logits_dtype``, Qwen3-MoE). They require grad when the logits do: not in
    a frozen layer before the first adapted one (``--layers-to-transform``) unless its router trains (a ``--bias
    all`` router bias, an adapted router)."""
    moe_layout = rp.model.layout.moe
    itemsize = logits.itemsize if moe_layout is not None and moe_layout.weights_in_logits_dtype else FP32_BYTES
    return rp.tape.new((rp.batch * rp.seq * rp.model.experts_per_token, 1), itemsize, logits.requires_grad)


def _eager_loop(rp: Replay) -> bool:
    """Whether transformers runs the experts with its eager per-expert loop (every precision that
    ``torch._grouped_mm`` does not take, :attr:`MoeLayout.grouped_mm_precisions`)."""
    moe_layout = rp.model.layout.moe
    return moe_layout is None or rp.spec.precision not in moe_layout.grouped_mm_precisions


def _eager_index_add(rp: Replay, x: SymTensor) -> None:
    """The eager loop's last op per expert, ``final.index_add_(0, token_idx, out.to(final.dtype))``
    (transformers 5.24 ``MixtralExperts.forward``): autograd's ``index_add`` saves its source, the weighted
    expert output in the hidden states' dtype (Tk, h), beside the token ids; so the loop keeps Tk*h*itemsize
    more than the grouped path, and its integer bookkeeping is the token ids and top-k positions of
    ``torch.where`` (2 x Tk int64), where the grouped path keeps a third (the inverse order).

    Worked (Tk = 64 routed rows, h = 64, fp32): 64*64*4 = 16,384 B for the sources, 1,024 B of indices,
    against the grouped path's 1,536 B of indices: +15,872 B per block, the gap a real fp32 step showed."""
    t = rp.tape
    Tk, h = rp.batch * rp.seq * rp.model.experts_per_token, rp.model.hidden
    t.save(t.new((Tk, h), x.itemsize, True), "moe/dispatch")


def _router_logits(rp: Replay, x: SymTensor, router: Linear) -> SymTensor:
    """The router ``F.linear(x, W)`` with W adapted by PEFT's ``ParamWrapper`` (a 2-D parameter, one expert).

    PEFT registers a parametrization: the effective weight ``W + (B @ A) * scaling`` (E x h, in the weight
    dtype; B @ A runs on the fp32 adapters, under autocast on their bf16 copies, which it saves) replaces W
    for the forward. The effective weight requires grad, so the linear saves its input x (b*s*h) as well
    as the weight (E*h, its autocast copy under mixed precision).
    """
    t, m = rp.tape, rp.model
    E, h, r = m.n_experts, m.hidden, lora_rank(router, rank_of(m, rp.spec, router))
    a, b = t.weight((r, h), FP32_BYTES, True), t.weight((E, r), FP32_BYTES, True)
    t.matmul(b, a, (E, h), "moe/router/lora")  # delta = B @ A, then W + delta.to(W.dtype)
    w_eff = t.new((E, h), _expert_itemsize(rp), True)
    xc = t.cast(x, t.compute_itemsize) if t.autocast else x
    wc = t.cast(w_eff, t.compute_itemsize) if t.autocast else w_eff
    t.save(xc, "moe/router")
    if xc.requires_grad:
        t.save(wc, "moe/router/effective_weight")
    return t.op((xc, wc), t.new(x.shape[:-1] + (E,), wc.itemsize, True))


def _expert_itemsize(rp: Replay) -> int:
    """The expert weights' dtype as the experts run: the weight dtype. Under mixed precision the fp32 experts
    run in fp32 (transformers' grouped_mm casts the input to the weight's dtype)."""
    return rp.tape.compute_itemsize if rp.spec.is_quantised else rp.spec.weight_bytes


def _effective_weight(rp: Replay, lin: Linear, component: str, *, pending: int) -> SymTensor:
    """PEFT's ``ParamWrapper`` on a fused 3-D expert parameter W (E, out, in): the effective weight.

    With one adapter and several experts PEFT folds the update with ``_LoraFactorsProxy``:
    ``W_eff = baddbmm(W, lhs, rhs, alpha=scaling)`` with lhs (E, out, r') and rhs (E, r', in) the fp32
    adapters reshaped and cast to W's dtype (r' = r, 2r for gate_up), autocast off. W_eff is a new
    E*out*in tensor in W's dtype that requires grad, made once per forward (``parametrize.cached()``) and
    kept by the expert matmuls until their backward. baddbmm saves lhs and rhs: copies of the adapters,
    E*r'*(in + out) elements in W's dtype, when that is not fp32 (else views of the adapters themselves).
    Its backward takes the gradient of W_eff (E*out*in again); ``pending``: the block's adapter gradient
    bytes that do not exist yet when it runs (see :func:`_adapted_experts`).
    """
    t, itemsize, r = rp.tape, _expert_itemsize(rp), lora_rank(lin, rank_of(rp.model, rp.spec, lin))
    factors = []
    for shape in ((lin.out_features, r), (r, lin.in_features)):
        f = t.param(shape, itemsize, True) if itemsize == FP32_BYTES else t.new(shape, itemsize, True)
        t.save(f, component + "/lora_factors")
        factors.append(f)
    w_eff = t.new((lin.experts, lin.out_features, lin.in_features), itemsize, True)
    t.event(w_eff.nbytes + sum(f.nbytes for f in factors) - pending)
    return w_eff


def _expert_matmul(rp: Replay, x: SymTensor, w: SymTensor, out_features: int,
                   component: str) -> tuple[SymTensor, SymTensor]:
    """``x @ W_eff`` per expert (grouped_mm, or the eager loop's per-expert ``F.linear`` on ``W_eff[e]``):
    saves the rows x (W_eff requires grad) and W_eff (a view keeps the whole E*out*in storage). Under
    autocast (mixed precision, eager loop) F.linear casts each ``W_eff[e]`` and the rows to bf16 and saves
    those copies (E*out*in in bf16 over the experts) instead; the fp32 W_eff is then not kept.
    Returns the output and the weight as saved."""
    t = rp.tape
    if t.autocast:
        xe, we = t.cast(x, t.compute_itemsize), t.new(w.shape, t.compute_itemsize, True)
    else:
        xe, we = t.cast(x, w.itemsize), w
    t.save(xe, component)
    if xe.requires_grad:
        t.save(we, component + "/effective_weight")
    return t.new(x.shape[:-1] + (out_features,), we.itemsize, True), we


def _adapted_experts(rp: Replay, x: SymTensor, gate_up: Linear, down: Linear, routing: SymTensor) -> SymTensor:
    """The experts with both fused parameters adapted (PEFT ``ParamWrapper``, see :func:`_effective_weight`),
    in the expert dtype (fp32 under mixed precision).

    Saved per block, beyond the plain experts' per-row tensors (Tk = b*s*k routed rows):
    W_eff(gate_up) E*2i*h + W_eff(down) E*h*i, the rows' inputs to both matmuls (Tk*h and Tk*i, now
    saved because the weight requires grad), and the bf16 adapter copies of the factors.

    Backward: under a grouped_mm precision (``MoeLayout.grouped_mm_precisions``: bf16) one grouped matmul
    whose backward makes the gradient of the whole W_eff at once (E*out*in). The others run transformers'
    eager per-expert loop: the backward of each ``W_eff[e]`` (a select) is a zero-filled E*out*in tensor,
    added out of place to the gradient accumulated from the other experts, so while the gate_up rows of an
    expert other than the last run backward, three E*2i*h tensors (accumulated, new, their sum) and the
    accumulated E*h*i gradient of down are alive beside everything the block saved::

        grouped:  saved(up to the matmul) + Tk*(in + out) + E*out*in - G(not made yet)    (per matmul)
        eager:    saved(block) - (E-2)/E * rows + Tk*(h + 2i) + 3 * E*2i*h + E*h*i - G(block)   (fp32 weights)

    where rows are the expert loop's per-row saved tensors (the rows spread evenly over the E experts;
    the E-2 experts whose backward ran before have freed theirs) and G(block) the block's adapter
    gradients, which the budget's block moments count but which do not exist yet while the expert rows
    run backward (the adapters' own backward comes after; down's adapter gradient, made by its baddbmm
    right after down's matmul, excepted).

    Worked (h=256, i=896, E=8, fp32): 3 * 14,680,064 + 7,340,032 = 51,380,224 B of expert-weight
    gradients at once.

    Under mixed precision the eager loop saves one bf16 copy per expert that has rows, so where a router
    (e.g. a randomly initialised one) sends a short batch to only some experts, fewer copies are kept and
    the estimate is above the real step.
    """
    t, m, spec = rp.tape, rp.model, rp.spec
    Tk, h, i = rp.batch * rp.seq * m.experts_per_token, m.hidden, m.intermediate
    eager = _eager_loop(rp)
    g_block = lora_params_per_layer(m, spec, rp.adapted) * FP32_BYTES  # this layer's adapters
    g_before_down = g_block - lora_linear_params(down, rank_of(m, spec, down)) * FP32_BYTES
    w_gu = _effective_weight(rp, gate_up, "moe/gate_up", pending=g_before_down)
    rows_start = t.saved_total
    gathered = t.new((Tk, h), x.itemsize, x.requires_grad)
    gu, wc_gu = _expert_matmul(rp, gathered, w_gu, 2 * i, "moe/gate_up")  # (Tk, 2i)
    rows_in = Tk * h * wc_gu.itemsize
    if not eager:
        t.event(gu.nbytes + rows_in + w_gu.nbytes - g_before_down)
    f = _gate(rp, gu, pending=g_before_down)
    w_d = _effective_weight(rp, down, "moe/down", pending=g_block)
    f, wc_d = _expert_matmul(rp, f, w_d, h, "moe/down")  # (Tk, h)
    if not eager:
        t.event(f.nbytes + Tk * i * w_d.itemsize + w_d.nbytes - g_block)
    f = t.mul(f, routing, "moe/weights", pending=g_block)
    if eager:
        _eager_index_add(rp, x)
    else:
        t.save(t.new((Tk,), INT64_BYTES, False), "moe/dispatch")
    if eager:
        # the experts after the second-to-last have run backward: their rows' saved tensors are gone
        E = m.n_experts
        weights = sum(w.storage_bytes for w in (wc_gu, wc_d) if w.storage in t.saved)
        rows_saved = t.saved_total - rows_start - weights
        alive = t.saved_total - rows_saved * (E - 2) // E
        t.event(gu.nbytes + rows_in + 3 * w_gu.nbytes + w_d.nbytes - g_block, saved_before=alive)
    return t.new((rp.batch, rp.seq, h), x.itemsize, f.requires_grad)
