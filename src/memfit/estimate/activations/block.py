"""One decoder block's forward, replayed from the architecture's :class:`BlockLayout` flags (no names):
the one recipe every architecture runs, as litgpt's ``Block.forward`` (the steps are listed in
:mod:`memfit.estimate.arch.layout`).

Shapes follow nanoGPT's notation: b batch, s sequence, h hidden, a heads, k key/value heads, d head_dim,
i intermediate.
"""

from __future__ import annotations

from memfit.estimate.activations import latent, moe, ops
from memfit.estimate.activations.ops import Replay, Rope
from memfit.estimate.activations.tape import SymTensor
from memfit.estimate.block_parts import Linear, LinearRole
from memfit.estimate.lora import block_linears_by_role


def block_forward(rp: Replay, x: SymTensor, rope: Rope | None) -> SymTensor:
    """Replay one decoder block on x (b, s, h); returns its output, the next block's input (b, s, h)."""
    m, lay, t = rp.model, rp.model.layout, rp.tape
    lins = block_linears_by_role(m)
    a_in = ops.norm(rp, x, "norm") if lay.pre_attn_norm else x
    o = latent.latent_attention(rp, a_in, lins, rope) if m.latent is not None else _attention(rp, a_in, lins, rope)
    on_sum = m.parallel_residual and lay.parallel_dropout_on_sum  # Falcon: one dropout on o + f
    if not on_sum:
        o = ops.dropout(rp, o, m.attn_output_dropout, "residual/dropout")  # e.g. GPT-2 attn.resid_dropout
    if lay.post_attn_norm:
        o = ops.norm(rp, o, "norm")
    if lay.scalar_multipliers:
        o = t.op((o,), t.new(o.shape, o.itemsize, o.requires_grad))  # * residual_multiplier (Granite)
    if m.parallel_residual:  # x + attn(norm(x)) + mlp(norm'(x))
        m_in = ops.norm(rp, x, "norm") if m.has_pre_mlp_norm else a_in
    else:
        x = t.add(x, o)
        m_in = ops.norm(rp, x, "norm") if m.has_pre_mlp_norm else x
    f = _mlp(rp, m_in, lins)
    if on_sum:
        return t.add(x, ops.dropout(rp, t.add(f, o), m.residual_dropout, "residual/dropout"))
    f = ops.dropout(rp, f, m.residual_dropout, "residual/dropout")  # e.g. GPT-2 mlp.dropout
    if lay.post_mlp_norm:
        f = ops.norm(rp, f, "norm")
    if lay.scalar_multipliers:
        f = t.op((f,), t.new(f.shape, f.itemsize, f.requires_grad))  # * residual_multiplier (Granite)
    if m.parallel_residual:
        return t.add(t.add(o, f), x)
    return t.add(x, f)


def _projections(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear]) -> tuple[SymTensor, ...]:
    """q (b, s, a*d), k and v (b, s, k*d): three linears, or three views of one fused output."""
    m = rp.model
    b, s = rp.batch, rp.seq
    if m.layout.fused_qkv:
        qkv = ops.linear(rp, x, lins["qkv"], "attention/qkv")  # (b, s, a*d + 2*k*d)
        if m.multi_query and m.layout.multi_query_kv_copies:  # Falcon: k, v = fused_qkv[..., [-2], :] ... copies
            return (qkv.view(b, s, m.q_dim),
                    *(rp.tape.new((b, s, m.kv_dim), qkv.itemsize, qkv.requires_grad) for _ in range(2)))
        return qkv.view(b, s, m.q_dim), qkv.view(b, s, m.kv_dim), qkv.view(b, s, m.kv_dim)
    return (ops.linear(rp, x, lins["q"], "attention/q"), ops.linear(rp, x, lins["k"], "attention/k"),
            ops.linear(rp, x, lins["v"], "attention/v"))


def _qk_norm(rp: Replay, q: SymTensor, k: SymTensor) -> tuple[SymTensor, SymTensor]:
    """q_norm / k_norm: per head (over d, on (b, s, a, d)) or over the full projection width."""
    m = rp.model
    b, s, d = rp.batch, rp.seq, m.head_dim
    if m.layout.qk_norm == "head":
        q, k = q.view(b, s, m.n_heads, d), k.view(b, s, m.n_kv_heads, d)
    return ops.norm(rp, q, "attention/qk_norm"), ops.norm(rp, k, "attention/qk_norm")


def _attention(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear], rope: Rope | None) -> SymTensor:
    """The attention sub-layer up to and including its output projection: (b, s, h) -> (b, s, h)."""
    m, lay, t = rp.model, rp.model.layout, rp.tape
    b, s, a, kv, d = rp.batch, rp.seq, m.n_heads, m.n_kv_heads, m.head_dim
    q, k, v = _projections(rp, x, lins)
    if lay.scale_query:
        q = t.new(q.shape, q.itemsize, q.requires_grad)  # q * d**-0.5 (OPT)
    if m.has_qk_norm:
        q, k = _qk_norm(rp, q, k)
    q, k, v = q.view(b, a, s, d), k.view(b, kv, s, d), v.view(b, kv, s, d)  # .transpose(1, 2)
    if rope is not None:
        q, k = ops.rope(rp, q, rope, "attention"), ops.rope(rp, k, rope, "attention")
    if lay.eager_qkv_copies and rp.spec.attention == "eager":
        # GPT-2's _attn: the matmuls take transposed views of the fused qkv output, which bmm copies
        q, k, v = (t.new(z.shape, z.itemsize, z.requires_grad) for z in (q, k, v))
    # q comes out of rope contiguous heads-first when rope ran on slices of a fused qkv output or ended in
    # the partial-rotary cat (ops._fused)
    heads_first = rope is not None and (lay.fused_qkv or m.rotary_fraction < 1.0)
    o = ops.attention(rp, q, k, v, heads_first=heads_first)  # (b, s, a*d)
    return ops.linear(rp, o, lins["o"], "attention/out")


def _mlp(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear]) -> SymTensor:
    """The MLP sub-layer: (b, s, h) -> (b, s, h)."""
    m, t = rp.model, rp.tape
    if m.layout.moe is not None and m.is_moe:  # a MoE model's dense-MLP layers run the gated MLP below
        return moe.moe_mlp(rp, x, lins)
    if m.layout.mlp == "plain":
        f = ops.activation(rp, ops.linear(rp, x, lins["up"], "mlp/up"), "mlp/act")  # (b, s, i)
        return ops.linear(rp, f, lins["down"], "mlp/down")
    if m.layout.fused_gate_up:
        gate_up = ops.linear(rp, x, lins["gate_up"], "mlp/gate_up")  # (b, s, 2i)
        gate, up = gate_up.view(rp.batch, rp.seq, m.intermediate), gate_up.view(rp.batch, rp.seq, m.intermediate)
        f = t.mul(up, ops.activation(rp, gate, "mlp/act"), "mlp/mul")  # up * act(gate)
        return ops.linear(rp, f, lins["down"], "mlp/down")
    g = ops.activation(rp, ops.linear(rp, x, lins["gate"], "mlp/gate"), "mlp/act")  # act(gate(x)) * up(x)
    f = t.mul(g, ops.linear(rp, x, lins["up"], "mlp/up"), "mlp/mul")
    return ops.linear(rp, f, lins["down"], "mlp/down")
