"""The model's output end: the final norm (OPT's project_out), lm_head and the loss, standard or chunked.

Standard (transformers' ``ForCausalLMLoss``): ``logits = lm_head(x)`` (b, s, V) in the compute dtype,
``logits.float()``, then ``cross_entropy`` = log_softmax (saves its fp32 (b*s, V) output) + nll_loss
(saves the shifted int64 labels). Gemma 2 soft-caps the logits first (``tanh(logits / cap) * cap``: tanh
saves its output).

Chunked (fused linear cross-entropy, Liger's ``LigerFusedLinearCrossEntropyLoss``): the forward walks the
tokens in chunks of C rows, computes each chunk's logits and their gradient at once, and keeps only
d(hidden) (b*s*h) and d(lm_head weight) (V*h, when trained) for the backward; the fp32 chunk logits and
their gradient (2 x C*V*4) are transient. C = next_pow2(ceil(b*s / ceil(V / h))), at most b*s.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.activations import ops
from memfit.estimate.activations.ops import Replay
from memfit.estimate.activations.tape import SymTensor
from memfit.estimate.adapter import tied_token_head, trainable_tokens
from memfit.estimate.constants import FP32_BYTES, INT64_BYTES
from memfit.estimate.lora import saved_modules
from memfit.estimate.trl_loss import trl_offloaded_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    """What the head and the loss keep: ``saved`` by the final norm and lm_head; ``loss`` what the loss keeps
    for the backward (standard: fp32 log-probabilities b*s*V*4 + labels b*s*8 + the fp32 scalar; chunked:
    d(hidden), d(lm_head weight) and the labels); ``logits_bytes`` the logits in their dtype (0 when
    chunked); ``loss_workspace`` the size of one vocabulary-wide fp32 tensor of the loss: b*s*V*4 (the
    upcast logits, the log-softmax output and each of their gradients), or C*V*4 per chunk."""

    saved: int
    loss: int
    logits_bytes: int
    loss_workspace: int
    # --trainable-tokens on a tied lm_head (estimate/adapter.py): its merged (V, h) table in the weight's dtype, the
    # table as F.linear sees it (its autocast copy, else itself: the size of its dense gradient), and what the
    # lm_head's matmul saved (the table or its copy, and x's copy) that its backward frees; and at the end of that
    # forward, what is alive beside the saved tensors: the merged table (a local of PEFT's forward_adapters until it
    # returns) when F.linear saw a copy, the logits and the head's input when nothing saved it; 0 otherwise
    table: int = 0
    table_used: int = 0
    table_saved: int = 0
    table_forward: int = 0
    loss_offloaded: int = 0  # --offload-activations: the loss's saved tensors in host memory (not in ``loss``)
    hidden_live: int = 0  # --offload-activations: the final hidden states (alive in the model's output while the loss
    # runs) when no device save holds them (lm_head frozen, or under autocast its bf16 copy)


def chunk_rows(tokens: int, vocab: int, width: int) -> int:
    """Liger's chunk size C = next_pow2(ceil(b*s / ceil(V / h))), at most b*s.

    >>> chunk_rows(8192, 128256, 4096)   # ceil(128256/4096) = 32; ceil(8192/32) = 256
    256
    """
    rows = -(-tokens // -(-vocab // width))
    chunk = 1
    while chunk < rows:
        chunk *= 2
    return min(chunk, tokens)


def head_and_loss(rp: Replay, x: SymTensor) -> Head:
    """Replay the final norm, lm_head and the loss on the last block's output x (b, s, h)."""
    t, m, spec = rp.tape, rp.model, rp.spec
    T, V, width = rp.batch * rp.seq, m.vocab, m.embed_dim
    mark = t.mark()
    xf = ops.norm(rp, x, "head") if m.final_norm else x
    if m.embed_proj_dim:  # OPT's project_out: (b, s, h) -> (b, s, embed_dim), no bias
        xf = t.linear(xf, t.weight((width, m.hidden), rp.float_itemsize, rp.full), width, "head")
    head_trained = rp.full or any(mod.role == "head" for mod in saved_modules(m, spec))
    lm_itemsize = rp.float_itemsize
    if spec.loss in ("chunked", "trl"):  # trl: its own head, booked by the budget (estimate/trl_loss.py)
        saved = sum(s.nbytes for s in t.saved_since(mark).values())
        loss = T * width * xf.itemsize + (V * width * lm_itemsize if head_trained else 0) + T * INT64_BYTES
        # --offload-activations: TRL's fused head's saved tensors go to the host (trl_offloaded_bytes)
        moved = trl_offloaded_bytes(spec, m, min_bytes=t.offload_min) if spec.loss == "trl" and t.offload_min else 0
        t.host_total += moved
        return Head(saved=saved, loss=loss, logits_bytes=0, loss_workspace=chunk_rows(T, V, width) * V * FP32_BYTES,
                    loss_offloaded=moved)
    t.offload_paused = True  # --offload-activations: TRL keeps lm_head's saved tensors on the device (NoOpManager)
    table = table_used = table_saved = table_forward = 0
    if tied_token_head(m, spec):  # PEFT 0.21.2's tied TrainableTokensLayer: F.linear(x, weight.index_copy(...))
        t.save(t.new((trainable_tokens(m, spec),), INT64_BYTES, False), "head")  # index_copy's int64 index
        # not a parameter: F.linear saves it. FSDP2's MixedPrecisionPolicy gathers the weight and the delta in the
        # compute dtype, so the table is built in it
        merged = t.new((V, width), t.compute_itemsize if t.params_in_compute else lm_itemsize, True)
        w = t.cast(merged, t.compute_itemsize) if t.autocast else merged  # the merged fp32 table freed after it
        before = t.saved_total
        logits = t.linear(xf, w, V, "head")
        table, table_used, table_saved = merged.nbytes, w.nbytes, t.saved_total - before
        table_forward = logits.nbytes + (0 if xf.storage in t.saved else xf.nbytes) + (
            merged.nbytes if w is not merged else 0)
    else:
        logits = t.linear(xf, t.weight((V, width), lm_itemsize, head_trained), V, "head")  # (b, s, V)
    t.offload_paused = False
    if m.final_softcap:
        logits = t.new(logits.shape, logits.itemsize, logits.requires_grad)  # / cap
        logits = t.unary_saving_output(logits, "head")  # tanh
        logits = t.new(logits.shape, logits.itemsize, logits.requires_grad)  # * cap
    if m.layout.scalar_multipliers:
        logits = t.op((logits,), t.new(logits.shape, logits.itemsize, logits.requires_grad))  # / logits_scaling
    saved = sum(s.nbytes for s in t.saved_since(mark).values())
    # logits.float(); cross_entropy = log_softmax (saves its output) + nll_loss (saves the labels); the mean
    loss = T * V * FP32_BYTES + T * INT64_BYTES + FP32_BYTES
    # --offload-activations: the log-probabilities and the labels (at least 1024 B each) go to the host; nll_loss
    # saves the log-probabilities again (its ``self``): a second host copy, which one unpack at a time brings back
    moved = sum(n for n in (T * V * FP32_BYTES, T * INT64_BYTES) if t.offload_min and n >= t.offload_min)
    t.host_total += moved + (T * V * FP32_BYTES if moved else 0)
    kept_x = head_trained and not t.autocast  # lm_head saved xf itself, on the device (NoOpManager)
    return Head(saved=saved, loss=loss - moved, logits_bytes=T * V * logits.itemsize,
                loss_workspace=T * V * FP32_BYTES, loss_offloaded=moved,
                hidden_live=0 if kept_x or not t.offload_min else xf.nbytes,
                table=table, table_used=table_used, table_saved=table_saved, table_forward=table_forward)
