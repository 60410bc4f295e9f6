"""The model's input end: token ids, the embedding (and learned positions), embedding scaling and dropout,
and the rotary tables every block shares."""

from __future__ import annotations

from dataclasses import replace

from memfit.estimate.activations import ops
from memfit.estimate.activations.ops import Replay, Rope
from memfit.estimate.activations.tape import SymTensor
from memfit.estimate.adapter import trainable_tokens
from memfit.estimate.constants import INT64_BYTES
from memfit.estimate.lora import saved_modules


def embed(rp: Replay) -> SymTensor:
    """The blocks' input (b, s, h) in the residual dtype; saves the ids (b, s) int64 when the table is trained
    (a full fine-tune, or ``--modules-to-save`` naming it), and the position ids for learned positions
    ((1, s) for GPT-2, (b, s) for OPT, built from the attention mask: ``position_ids_per_row``). A token
    embedding narrower than h (OPT's ``word_embed_proj_dim``) goes through ``project_in`` first."""
    t, m, lay = rp.tape, rp.model, rp.model.layout
    b, s = rp.batch, rp.seq
    tokens = trainable_tokens(m, rp.spec)  # --trainable-tokens: the merged table requires grad
    trained = rp.full or any(mod.role == "embed" for mod in saved_modules(m, rp.spec)) or tokens > 0
    resid = rp.float_itemsize
    ids = t.new((b, s), INT64_BYTES, False)
    if trained:
        t.save(ids, "embedding")
    if tokens:  # TrainableTokensLayer: index_copy keeps its int64 index (k) for the delta's gradient
        t.save(t.new((tokens,), INT64_BYTES, False), "embedding")
    x = t.new((b, s, m.embed_dim), resid, trained)
    if m.embed_proj_dim:  # OPT's project_in: (b, s, embed_dim) -> (b, s, h), no bias
        x = t.linear(x, t.weight((m.hidden, m.embed_dim), resid, rp.full), m.hidden, "embedding")
    if lay.position == "learned":
        position_ids = t.new((b if lay.position_ids_per_row else 1, s), INT64_BYTES, False)
        if trained:
            t.save(position_ids, "embedding")
        x = t.add(x, t.new((1, s, m.hidden), resid, trained))
    if lay.embed_scale:
        x = t.mul(x, t.new((), resid, False), "embedding")  # hidden_states * normalizer (a 0-dim tensor)
    if lay.scalar_multipliers:
        if not x.requires_grad and rp.spec.is_adapter and rp.spec.checkpointing != "none":
            # enable_input_require_grads() turns the frozen embedding's output into a leaf that requires grad;
            # the product with embedding_multiplier is a new tensor, and the leaf stays referenced by the
            # graph's AccumulateGrad node to the end of the backward (b*s*h in the residual dtype)
            t.save(x, "embedding")
        x = t.op((x,), t.new(x.shape, x.itemsize, x.requires_grad))  # inputs_embeds * embedding_multiplier
    if m.embedding_dropout > 0.0:
        # GPT-2's transformer.drop, GPT-NeoX's emb_dropout. It saves its mask when the embedding output requires
        # grad: a trained table, or an adapter run with checkpointing, where PEFT (and memfit.measure) call
        # enable_input_require_grads() (the blocks are replayed as before: block 0 with a frozen input).
        grad_in = x.requires_grad or (rp.spec.is_adapter and rp.spec.checkpointing != "none")
        dropped = ops.dropout(rp, replace(x, requires_grad=grad_in), m.embedding_dropout, "embedding")
        x = replace(dropped, requires_grad=x.requires_grad)
    return x


def rotary_tables(rp: Replay) -> Rope | None:
    """cos and sin, (1, s, rotary d) each in the residual dtype (position_ids has batch 1), made once per
    forward and shared by every block; None for learned positions."""
    m = rp.model
    if m.layout.position != "rotary":
        return None
    rotary_d = int(m.head_dim * m.rotary_fraction) // (2 if m.layout.rotary_half_tables else 1)
    t = rp.tape
    return (t.new((1, rp.seq, rotary_d), rp.float_itemsize, False),
            t.new((1, rp.seq, rotary_d), rp.float_itemsize, False))
