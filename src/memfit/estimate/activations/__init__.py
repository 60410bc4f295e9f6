"""Activations: what autograd keeps from the forward for the backward, op by op, for one training step.

The forward is replayed symbolically, op by op, as transformers 5.24 writes it, on tensors that carry only
their shape, dtype, ``requires_grad`` and storage (:mod:`.tape`): the embedding (:mod:`.embedding`), the
decoder blocks (:mod:`.block`, one recipe driven by the architecture's layout flags, with the ops of
:mod:`.ops` and the mixture of experts of :mod:`.moe`), the final norm, lm_head and the loss
(:mod:`.head`); checkpointing decides what the blocks keep (:mod:`.checkpointing`).

Under autocast (``mixed-*``) every linear / matmul / sdpa input is cast to the compute dtype: the cast
copies are what is saved, one per consumer (q, k and v each save their own bf16 copy of the normed
input), and frozen weights are cast again at every call, so a frozen linear whose input requires grad
keeps a bf16 copy of its weight alive until its backward runs.

Parameters are not activations. Block 0 and block 1 are replayed; layers 1..L-1 are alike: layer 0
differs because its input (the embedding output) does not require grad when the embedding is frozen
(LoRA), so it saves less.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memfit.errors import MemfitError
from memfit.estimate.activations.block import block_forward
from memfit.estimate.activations.checkpointing import checkpoint_segment, checkpoints
from memfit.estimate.activations.embedding import embed, rotary_tables
from memfit.estimate.activations.head import head_and_loss
from memfit.estimate.activations.ops import Replay, Rope
from memfit.estimate.activations.tape import Saved, SymTensor
from memfit.estimate.adapter import layer_adapters
from memfit.estimate.constants import RULE_OF_THUMB_BYTES, TRL_MIN_OFFLOAD_BYTES
from memfit.estimate.lora import block_linears
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivationBytes:
    """Bytes saved for backward by one forward pass, by where they are kept.

    ``first_layer`` and ``per_layer`` are one block's saved bytes (layer 0 and each of layers 1..L-1),
    ``by_component`` splits a typical block (``"attention/scores"``, ``"mlp/act"`` ...), ``shared`` are
    tensors made once and used by every block (rotary cos/sin), ``head`` the final norm and lm_head
    inputs, ``loss`` what the loss keeps (standard: the fp32 log-softmax b*s*V*4 and the labels; chunked:
    d(hidden), d(lm_head) and the labels), ``embedding`` the ids.
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
    logits_bytes: int  # b*s*V in the logits' dtype (compute dtype); 0 for the chunked loss
    loss_workspace: int  # one fp32 vocabulary-wide tensor of the loss: b*s*V*4 (standard), C*V*4 (chunked)
    backward_first: int = 0  # block 0's saved bytes + gradients alive at the widest op of its backward
    backward_per: int = 0  # the same for a typical block
    input_saved: int = 0  # bytes of a block's input that the block itself saves (a checkpoint aliases it)
    plain_blocks: int = 0  # every-k: blocks that are not checkpointed and keep all they save
    layers_extra: int = 0  # layers 1..L-1 of another kind than the typical block: their bytes less per_layer
    offloaded: int = 0  # --offload: the checkpoints' copies in host memory (not device bytes)
    leaf_input: int = 0  # --offload: block 0's input when it is a leaf the graph keeps on the device (else 0)
    forward_saved: int = 0  # a typical block's widest forward transient (DoRA's weight norm): its bytes saved by then
    forward_temps: int = 0  # ... and the temporaries alive at that moment (0: none recorded)
    # --trainable-tokens on a tied lm_head (estimate/adapter.py, activations/head.py Head): the merged (V, h) table in
    # the weight's dtype, the table F.linear saw (its autocast copy, else itself), what that matmul saved, and the
    # temporaries at the end of the lm_head's forward (Head.table_forward)
    head_table: int = 0
    head_table_used: int = 0
    head_table_saved: int = 0
    head_table_forward: int = 0
    loss_offloaded: int = 0  # --offload-activations: the loss's saved tensors, in host memory (not in ``loss``)
    hidden_live: int = 0  # --offload-activations: the final hidden states alive while the loss runs (head.py)
    forward_cached: int = 0  # --offload-activations, autocast: trainable weights' cached casts, to the forward's end

    @property
    def layers(self) -> int:
        """Saved bytes of all blocks at the end of the forward."""
        if self.plain_blocks:  # every-k: block 0 is a checkpoint, the plain blocks are later ones
            return self.checkpoints + self.plain_blocks * self.per_layer
        if self.segment:
            return self.checkpoints
        return self.first_layer + (self.n_layers - 1) * self.per_layer + self.layers_extra

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
    return n_layers * batch * seq * hidden * RULE_OF_THUMB_BYTES


@dataclass(frozen=True, kw_only=True, slots=True)
class _Blocks:
    """Block 0 and a typical block, replayed."""

    first: dict[str, int]  # saved bytes by component
    per: dict[str, int]
    shared: int
    backward_first: int
    backward_per: int
    input_saved: int
    first_out: SymTensor
    last: SymTensor
    layers_extra: int = 0
    held_per: int = 0  # bytes of a typical block's storages held by an autograd ctx (Tape.held)
    forward: tuple[int, int] = (0, 0)  # the typical block's widest forward transient (Tape.forward_peak)
    host: int = 0  # --offload-activations without checkpointing: every layer's host copies (Tape.host_total)
    cached: int = 0  # ... and every layer's autocast-cached weight casts (Tape.cached_total)


def _by_component(saved: dict[int, Saved], skip: set[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for storage, s in saved.items():
        if storage not in skip:
            out[s.component] = out.get(s.component, 0) + s.nbytes
    return out


def sdpa_masked_layers(shape: ModelShape, spec: RunSpec) -> tuple[bool, ...]:
    """The layers whose sdpa call takes a mask that the run's ``padding_mask`` does not already give every layer:
    the sliding layers once ``seq`` reaches the window, where the layout says so (``BlockLayout.sliding_sdpa_mask``).

    >>> from memfit.estimate import lookup
    >>> sum(sdpa_masked_layers(lookup("gemma-3-1b").shape, RunSpec(seq=512)))   # window 512: 22 sliding layers
    22
    >>> sum(sdpa_masked_layers(lookup("gemma-3-1b").shape, RunSpec(seq=511)))
    0
    """
    window = shape.sliding_window
    if (spec.attention != "sdpa" or spec.padding_mask or not shape.layout.sliding_sdpa_mask or window is None
            or spec.seq < window):
        return (False,) * shape.n_layers
    return tuple(t == "sliding" for t in shape.layer_types)


Kind = tuple[ModelShape, bool, frozenset[str]]  # a layer's block kind, whether its sdpa takes a mask, its adapters


def _layer_replay(rp: Replay, kind: Kind) -> Replay:
    """The replay of a layer of ``kind``: its block kind (:meth:`ModelShape.layer_shape`: a MoE model's dense-MLP
    layers), whether its sdpa call takes a mask (the padding-mask path) and the paths of the linears PEFT adapts in
    it (``--layers-to-transform``: none, or only fused experts and router), on the same tape."""
    model, masked, adapted = kind
    if model is not rp.model or adapted != rp.adapted:
        rp = replace(rp, model=model, adapted=adapted)
    return replace(rp, spec=rp.spec.with_(padding_mask=True)) if masked else rp


def _replay_blocks(rp: Replay, x: SymTensor, rope: Rope | None) -> _Blocks:
    """Replay block 0 on the embedding output and a typical block on block 0's output. cos/sin count as ``shared``
    in the first block that saves them (a frozen block 0 may not). The typical block has layer 1's sdpa mask and
    the last layer's MLP kind (DeepSeek's dense-first layers: the MoE block). Where layers 1..L-1 include other
    kinds (a sliding layer with an sdpa mask beside full ones: :func:`sdpa_masked_layers`; a dense-MLP layer), one
    block of each is replayed after it and ``layers_extra`` adds the difference for each such layer."""
    t, m = rp.tape, rp.model
    masked = sdpa_masked_layers(m, rp.spec)
    adapted = layer_adapters(m, rp.spec) if rp.spec.is_adapter else (rp.adapted,) * m.n_layers
    kinds = [(m.layer_shape(i), masked[i], adapted[i]) for i in range(m.n_layers)]
    every = layer_adapters(m, rp.spec.with_(layers_to_transform=(), layers_pattern=())) if rp.spec.is_adapter \
        else adapted
    rope_storages = {r.storage for r in rope} if rope is not None else set()
    mark, h0, c0 = t.mark(), t.host_total, t.cached_total
    x1 = block_forward(_layer_replay(rp, kinds[0]), x, rope)
    h1, c1 = t.host_total, t.cached_total
    first_saved, backward_first = t.saved_since(mark), t.backward_peak(mark)
    shared = rope_storages & first_saved.keys()
    first = _by_component(first_saved, shared)
    if m.n_layers == 1:
        input_saved = first_saved[x.storage].nbytes if x.storage in first_saved else 0
        return _Blocks(first=first, per=first, shared=sum(t.saved[s].nbytes for s in shared),
                       backward_first=backward_first, backward_per=backward_first, input_saved=input_saved,
                       first_out=x1, last=x1, forward=t.forward_peak(mark), host=h1 - h0, cached=c1 - c0)
    if adapted != every:
        if t.offload_min:
            raise MemfitError("the estimate does not model --offload-activations with --layers-to-transform: "
                              "run `memfit trace` or `memfit measure`, or drop one of them")
        return _replay_layer_by_layer(rp, kinds, x1, rope, first=first, backward_first=backward_first,
                                      shared=shared, rope_storages=rope_storages)
    typical = (kinds[-1][0], masked[1], adapted[-1])
    mark = t.mark()
    x2 = block_forward(_layer_replay(rp, typical), x1, rope)
    per_saved, backward_per, forward = t.saved_since(mark), t.backward_peak(mark), t.forward_peak(mark)
    host_per, cached_per = t.host_total - h1, t.cached_total - c1
    host = h1 - h0 + (m.n_layers - 1) * host_per
    cached = c1 - c0 + (m.n_layers - 1) * cached_per
    shared = shared or (rope_storages & per_saved.keys())
    per = _by_component(per_saved, shared)
    others: dict[Kind, int] = {}
    for kind in kinds[1:]:
        if kind != typical:
            others[kind] = others.get(kind, 0) + 1
    extra = 0
    for kind, count in others.items():
        mark, h, c = t.mark(), t.host_total, t.cached_total
        x2 = block_forward(_layer_replay(rp, kind), x2, rope)
        other = sum(_by_component(t.saved_since(mark), shared).values())
        extra += count * (other - sum(per.values()))
        host += count * (t.host_total - h - host_per)
        cached += count * (t.cached_total - c - cached_per)
    return _Blocks(first=first, per=per, shared=sum(t.saved[s].nbytes for s in shared),
                   backward_first=backward_first, backward_per=backward_per,
                   input_saved=per_saved[x1.storage].nbytes if x1.storage in per_saved else 0,
                   first_out=x1, last=x2, layers_extra=extra, forward=forward, host=host, cached=cached,
                   held_per=sum(t.held.get(s, 0) for s in per_saved if s != x1.storage))


def _replay_layer_by_layer(rp: Replay, kinds: list[Kind], x1: SymTensor, rope: Rope | None, *,
                           first: dict[str, int], backward_first: int, shared: set[int],
                           rope_storages: set[int]) -> _Blocks:
    """Layers 1..L-1 when some have no adapter (``--layers-to-transform``): what a block saves depends on its kind
    and on whether its input requires grad (a frozen layer before the first adapted one saves nothing, one after
    it saves what the input gradient needs), so each (kind, input requires grad) is replayed once, in layer order,
    and a later layer of the same pair takes its bytes. The typical block is the last layer; ``layers_extra`` adds
    every other layer's difference from it."""
    t = rp.tape
    seen: dict[tuple[Kind, bool], tuple[dict[int, Saved], int, tuple[int, int], bool, int]] = {}
    order: list[tuple[Kind, bool]] = []
    x = x1
    for kind in kinds[1:]:
        key = (kind, x.requires_grad)
        order.append(key)
        if key in seen:  # the same block on the same kind of input: a fresh output, as its replay gave
            x = t.new(x.shape, x.itemsize, seen[key][3])
            continue
        mark = t.mark()
        out = block_forward(_layer_replay(rp, kind), x, rope)
        seen[key] = (t.saved_since(mark), t.backward_peak(mark), t.forward_peak(mark), out.requires_grad, x.storage)
        x = out
    shared = shared or (rope_storages & {s for saved, *_ in seen.values() for s in saved})
    sizes = {key: sum(_by_component(v[0], shared).values()) for key, v in seen.items()}
    per_saved, backward_per, forward, _, x_in = seen[order[-1]]
    per = _by_component(per_saved, shared)
    return _Blocks(first=first, per=per, shared=sum(t.saved[s].nbytes for s in shared),
                   backward_first=backward_first, backward_per=backward_per,
                   input_saved=per_saved[x_in].nbytes if x_in in per_saved else 0,
                   first_out=x1, last=x, layers_extra=sum(sizes[key] for key in order) - len(order) * sizes[order[-1]],
                   forward=forward, held_per=sum(t.held.get(s, 0) for s in per_saved if s != x_in))


def _check_run(rp: Replay) -> None:
    """Refuse what transformers or PEFT refuse for this model and run."""
    m, spec = rp.model, rp.spec
    wrapped = sorted({lin.name for lin in block_linears(m) if lin.path in rp.adapted and not lin.is_nn_linear})
    if spec.use_dora and wrapped:
        # peft 0.21.2 ParamWrapper.__init__: "does not work with use_dora=True" (a ValueError)
        raise MemfitError(f"PEFT cannot apply DoRA to {', '.join(wrapped)} ({m.model_type}'s router / fused experts, "
                          "which --targets all-linear adapts through ParamWrapper): drop --dora, or name the "
                          "attention projections in --targets (e.g. q_proj,v_proj)")
    if spec.lora_dropout > 0.0 and wrapped:
        # peft 0.21.2 ParamWrapper.update_layer: "does not work with lora_dropout != 0" (a ValueError)
        raise MemfitError(f"PEFT cannot apply LoRA dropout to {', '.join(wrapped)} ({m.model_type}'s router / "
                          "fused experts, which --targets all-linear adapts through ParamWrapper): pass "
                          "--lora-dropout 0, or name the attention projections in --targets (e.g. q_proj,v_proj)")


def _check_offload_activations(spec: RunSpec) -> None:
    """Refuse the --offload-activations runs the estimate does not model (trace and measure run them)."""
    if not spec.offload_activations:
        return
    if spec.checkpointing == "every-k":
        raise MemfitError("the estimate does not model --offload-activations with --checkpointing every-k: run "
                          "`memfit trace` or `memfit measure`, or use --checkpointing full or none")
    if spec.loss == "chunked":
        raise MemfitError(f"the estimate does not model --offload-activations with --loss {spec.loss}: run "
                          "`memfit trace` or `memfit measure`, or use --loss standard")


def estimate_activations(shape: ModelShape, spec: RunSpec) -> ActivationBytes:
    """Saved-for-backward bytes of one forward of ``shape`` under ``spec``; see the module docstring."""
    shape.arch.check_attention(spec.attention)
    if shape.layout.position == "learned" and spec.seq > shape.max_positions:
        raise MemfitError(f"{shape.name} has {shape.max_positions:,} learned positions; --seq {spec.seq:,} "
                          f"exceeds them: use --seq {shape.max_positions} or less")
    rp = Replay.start(shape, spec)
    if spec.offload_activations:  # TRL's OffloadActivations (Tape.save, Tape.weight)
        rp.tape.offload_min, rp.tape.cache_casts = TRL_MIN_OFFLOAD_BYTES, True
        rp.tape.offload_copy_back = spec.device == "cuda"
    _check_run(rp)
    _check_offload_activations(spec)
    x = embed(rp)
    embedding = rp.tape.saved_total
    host_outside = rp.tape.host_total  # --offload-activations: the embedding's saved ids, later the head and loss
    ckpt = spec.checkpointing != "none"
    offload_min, cached_before = rp.tape.offload_min, rp.tape.cached_total
    if ckpt:  # the blocks save under checkpoint's own hooks (innermost): recomputed, not offloaded
        rp.tape.offload_min = 0
    blocks = _replay_blocks(rp, x, rotary_tables(rp))
    rp.tape.offload_min, before_head = offload_min, rp.tape.host_total
    cached_blocks = rp.tape.cached_total - cached_before
    # one cos/sin pair per attention type (Gemma 3), each saved by the layers of its type like the first
    shared = blocks.shared * (len(set(shape.layer_types)) if shape.layout.rope_per_layer_type else 1)
    head = head_and_loss(rp, blocks.last)
    host_outside += rp.tape.host_total - before_head
    # autocast's cached casts of the trainable weights, on the device to the end of the forward (--offload-activations)
    cached = rp.tape.cached_total - cached_blocks + blocks.cached
    layer_input = spec.batch * spec.seq * shape.hidden * blocks.first_out.itemsize
    lay = shape.layout
    # block 0's input is the embedding lookup itself (nothing applied after it) and a leaf: a frozen table,
    # with enable_input_require_grads (adapters with checkpointing) making its output require grad
    raw_lookup = not (shape.embed_proj_dim or lay.position == "learned" or lay.embed_scale or lay.scalar_multipliers
                      or shape.embedding_dropout > 0.0)
    leaf = spec.is_adapter and raw_lookup and not x.requires_grad
    ck = checkpoints(shape, spec, layer_input=layer_input, mask_itemsize=rp.float_itemsize,
                     sliding_masks=any(sdpa_masked_layers(shape, spec)), leaf_input=leaf)
    first, per = sum(blocks.first.values()), sum(blocks.per.values())
    # what checkpointed blocks cannot drop (LLM.int8 linears' inputs, held by their autograd ctx), kept beside
    # their checkpoints through the forward
    held = blocks.held_per * (shape.n_layers - ck.plain_blocks) if ck.segment else 0
    return ActivationBytes(
        first_layer=first, per_layer=per, by_component=blocks.per, first_by_component=blocks.first,
        shared=shared, head=head.saved, loss=head.loss, embedding=embedding, checkpoints=ck.kept_bytes + held,
        n_layers=shape.n_layers, segment=ck.segment, layer_input=layer_input, logits_bytes=head.logits_bytes,
        loss_workspace=head.loss_workspace, backward_first=max(first, blocks.backward_first),
        backward_per=max(per, blocks.backward_per), input_saved=blocks.input_saved, plain_blocks=ck.plain_blocks,
        layers_extra=blocks.layers_extra, offloaded=ck.host_bytes + (host_outside + blocks.host if offload_min else 0),
        leaf_input=layer_input if (leaf and (spec.offload or spec.offload_activations) and ck.segment) else 0,
        loss_offloaded=head.loss_offloaded, hidden_live=head.hidden_live, forward_cached=cached,
        forward_saved=blocks.forward[0], forward_temps=blocks.forward[1],
        head_table=head.table, head_table_used=head.table_used, head_table_saved=head.table_saved,
        head_table_forward=head.table_forward,
    )


__all__ = ["ActivationBytes", "checkpoint_segment", "estimate_activations", "rule_of_thumb_activation_bytes",
           "sdpa_masked_layers"]
