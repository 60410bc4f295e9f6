"""Multi-head latent attention (``BlockLayout.latent_attention``), as transformers 5.24's ``DeepseekV3Attention``
runs it, up to and including its output projection: (b, s, h) -> (b, s, h)::

    q = q_b(q_a_layernorm(q_a(x)))   or q_proj(x)      (b, s, a*qk), viewed (b, a, s, qk)
    q_pass, q_rot = split(q, [nope, rope])             views
    ckv = kv_a_proj_with_mqa(x)                        (b, s, kv_rank + rope)
    kv, k_rot = split(ckv, [kv_rank, rope])            views: the norm reads a view of ckv
    kv = kv_a_layernorm(kv)
    q_rot, k_rot = rope(q_rot, k_rot)                  interleaved or rotate_half: both save only cos and sin
    query = cat(q_pass, q_rot)                         (b, a, s, qk), a new tensor
    kvb = kv_b_proj(kv)                                (b, s, a*(nope + v))
    k_nope, value = split(kvb.view(b, s, a, nope + v).transpose(1, 2), [nope, v])     views
    key = new_empty(b, a, s, qk); key[..., :nope] = k_nope; key[..., nope:] = k_rot   a new tensor
    o = o_proj(attention(query, key, value).reshape(b, s, a*v))

Saved beyond the linears' inputs and the norms: the attention's operands (the query and key copies, and value: at
batch 1 a view that keeps kv_b's whole output alive, else the bmm's contiguous copy) and, where v is narrower than
q and k, the CPU sdpa math path's fp32 scores (:func:`memfit.estimate.activations.ops.attention`) or flash's
zero-padded v (transformers' flash integration pads v to q's width and crops the output).
"""

from __future__ import annotations

from memfit.estimate.activations import ops
from memfit.estimate.activations.ops import Replay, Rope
from memfit.estimate.activations.tape import SymTensor
from memfit.estimate.block_parts import Linear, LinearRole


def latent_attention(rp: Replay, x: SymTensor, lins: dict[LinearRole, Linear], rope: Rope | None) -> SymTensor:
    """The attention sub-layer of a multi-head latent attention block (module docstring)."""
    m, t = rp.model, rp.tape
    lat = m.latent
    assert lat is not None
    b, s, a = rp.batch, rp.seq, m.n_heads
    if lat.q_rank:
        qa = ops.linear(rp, x, lins["q_a"], "attention/q_a")
        q = ops.linear(rp, ops.norm(rp, qa, "attention/q_a_norm"), lins["q_b"], "attention/q")
    else:
        q = ops.linear(rp, x, lins["q"], "attention/q")
    ckv = ops.linear(rp, x, lins["kv_a"], "attention/kv_a")  # (b, s, kv_rank + rope)
    kv = ops.norm(rp, ckv.view(b, s, lat.kv_rank), "attention/kv_a_norm")
    q_rot, k_rot = q.view(b, a, s, lat.rope), ckv.view(b, 1, s, lat.rope)
    if rope is not None:
        q_rot, k_rot = _rope(rp, q_rot, rope), _rope(rp, k_rot, rope)
    query = t.new((b, a, s, lat.qk), max(q.itemsize, q_rot.itemsize), q.requires_grad or q_rot.requires_grad)
    kvb = ops.linear(rp, kv, lins["kv_b"], "attention/kv_b")  # (b, s, a*(nope + v))
    key = t.new((b, a, s, lat.qk), kvb.itemsize, kvb.requires_grad or k_rot.requires_grad)
    value = kvb.view(b, a, s, lat.v)
    if rp.spec.attention == "eager" and b > 1:
        # matmul folds (b, a, s, v) into bmm's (b*a, s, v): a split view of kv_b's output reshapes to a copy (at b 1 it
        # only drops a dimension, and the saved view keeps kv_b's whole output)
        value = t.new(value.shape, value.itemsize, value.requires_grad)
    if rp.spec.attention == "flash" and lat.v != lat.qk:
        padded = t.new((b, a, s, lat.qk), value.itemsize, value.requires_grad)  # F.pad(value, [0, qk - v])
        o = ops.attention(rp, query, key, padded, heads_first=True)  # (b, s, a*qk)
        o = t.new((b, s, a * lat.v), o.itemsize, o.requires_grad)  # [..., :v], then reshape: a copy
    else:
        o = ops.attention(rp, query, key, value, heads_first=True)  # (b, s, a*v)
    return ops.linear(rp, o, lins["o"], "attention/out")


def _rope(rp: Replay, x: SymTensor, cos_sin: Rope) -> SymTensor:
    """Rope on x's rope columns (b, heads, s, rope): ``apply_rotary_pos_emb_interleave`` (DeepSeek's default,
    ``rope_interleave``) multiplies the even and odd halves by cos and sin, ``apply_rotary_pos_emb`` x and
    rotate_half(x): either way the products save cos and sin (x's other operands need no gradient) and the
    result is a new tensor in the wider dtype of x and the tables."""
    t, (cos, sin) = rp.tape, cos_sin
    if x.requires_grad:
        t.save(cos, "attention/rope")
        t.save(sin, "attention/rope")
    return t.op((x,), t.new(x.shape, max(x.itemsize, cos.itemsize), x.requires_grad))
