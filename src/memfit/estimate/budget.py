"""The memory budget of one training step: the peak of live tensor bytes, its phase, and what is alive then.

The step is the HF Trainer's: ``loss = model(input_ids, labels=...).loss`` (the output and its logits are
dropped before backward), ``loss.backward()``, ``optimizer.step()``, ``zero_grad(set_to_none=True)``.
memfit predicts the steady state, from the second step on: the optimizer states (allocated lazily by the
first ``step()``) are alive through the forward and backward, gradients are not (set to None). With
``grad_accum`` > 1 the step runs that many micro-batches before the optimizer, and from the second one on
every gradient is alive through the forward and backward too (the moments below then carry G).

Candidates for the peak, with W weights, O optimizer states, A saved activations (see
:mod:`memfit.estimate.activations`), G gradients and Vf = b*s*V*4 (fp32 logits):

=====================  ===============================================================================
moment                 alive
=====================  ===============================================================================
forward, loss          W + O + A(blocks, head) + logits (b*s*V, compute dtype) + logits.float() (Vf,
                       when the compute dtype is not fp32) + log-softmax output (Vf)
backward, loss         W + O + A + log-softmax output + its gradient + the logits' gradient (3 Vf):
                       usually the peak of an adapter run with a real vocabulary
backward, last block   W + O + A - loss - head - (that block) + G(head, last block) + the block's own
                       backward: the tensors it saved up to its widest op plus the gradients of that
                       op's output and inputs (a reverse replay of the block's ops) + the residual
                       stream's gradient (b*s*h)
backward, first block  W + O + A(block 0's backward as above) + G(all blocks, head)
forward / recompute,   with DoRA: the blocks' saved tensors up to the last block's widest DoRA weight norm
last block             (eye(in), lora_B(lora_A(eye)), W + s*BA: :func:`~.activations.ops.dora_weight_norm`)
                       plus those temporaries; with checkpointing also in the recompute of the last
                       and of the first block (with every later block's gradients)
optimizer              W + G + O + the optimizer's temporaries (see :func:`optimizer_temporaries`)
evaluation             with ``eval_batch``: W + O + an eval step's logits and loss, and the logits the
                       Trainer keeps for its metrics (:mod:`memfit.estimate.evaluation`)
=====================  ===============================================================================

With checkpointing, A(blocks) is the kept segment inputs (plus the (b, 1, s, s) attention mask that
eager attention passes to every checkpointed block), and each backward moment adds the activations of
the one segment being recomputed (its own input is the checkpoint, counted once).

Each moment is a typed :class:`~memfit.estimate.moments.Moment` (phase, label, bytes by
:class:`~memfit.estimate.category.Category`); the peak is the largest. With ``spec.sharding`` over
``spec.gpus`` GPUs every moment is taken per GPU first (:mod:`memfit.estimate.sharding`), so the peak,
its components and ``reserved_bytes`` are one GPU's. Checked against real CPU steps
(``bench/bench_estimate.py``, ``tests/estimate/test_agreement_fast.py``; the figures are in
bench/RESULTS.md): the replay does not model every backward temporary (e.g. transposed copies inside bmm
backward), which shows when a block's backward is the peak.

``reserved_bytes`` (CUDA only) is what ``torch.cuda.memory_reserved`` and ``nvidia-smi`` show: the step's
allocation sequence synthesised from the estimate's own tensors (:mod:`memfit.estimate.synth_allocations`, two
steps) replayed through a model of torch 2.13's caching allocator (:mod:`memfit.estimate.allocator`: 512 B
blocks, 2 MiB / 20 MiB segments, best fit, splitting; ``spec.alloc_conf`` = ``PYTORCH_CUDA_ALLOC_CONF``'s
``expandable_segments`` / ``max_split_size_mb``), its reserved peak + the CUDA context with cuBLAS / cuDNN
workspaces, assumed 512 MiB (commonly 300-600 MiB depending on driver and GPU; not measured here), + any bytes of
the peak the coarser sequence does not allocate (:func:`replayed_reserved_bytes`). The replay runs on first use
of ``reserved_bytes`` (17-150 ms for the bench's models, a 70B ~110 ms; the peak alone stays ~1 ms), so the
advisor replays only runs whose peak + context fits. Sharded runs keep the stated rule (peak + 5% + 256 MiB +
512 MiB): the sequence is one unsharded replica's. Whether the run fits is :mod:`memfit.estimate.fits`' rule,
the same in ``estimate``, ``trace`` and ``fit``: ``reserved_bytes`` + the headroom (default 5% of the GPU) <= the
GPU's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from memfit.estimate.activations import ActivationBytes, estimate_activations, rule_of_thumb_activation_bytes
from memfit.estimate.adapter import trainable_tokens
from memfit.estimate.allocator import AllocatorReplay, replay
from memfit.estimate.category import Category
from memfit.estimate.constants import INT64_BYTES
from memfit.estimate.evaluation import eval_moments, eval_summary
from memfit.estimate.fits import (
    ALLOCATOR_OVERHEAD_BYTES,
    ALLOCATOR_OVERHEAD_FRACTION,
    CUDA_CONTEXT_BYTES,
    reserved_bytes,
)
from memfit.estimate.fsdp_grads import middle_blocks
from memfit.estimate.fsdp_wrap import LAST_GATHER
from memfit.estimate.moments import Moment, peak_moment
from memfit.estimate.shape import ModelShape
from memfit.estimate.sharding import FSDP2, ShardedPeak, shard_moments
from memfit.estimate.spec import RunSpec
from memfit.estimate.states import ModelStates, model_states, optimizer_temporaries
from memfit.estimate.synth_allocations import allocations_of
from memfit.estimate.trl_loss import (
    TRL_TOKEN_CHUNK,
    TRL_VOCAB_CHUNK,
    trl_forward_bytes,
    trl_loss_bytes,
    trl_scored_tokens,
)

__all__ = ["ALLOCATOR_OVERHEAD_BYTES", "ALLOCATOR_OVERHEAD_FRACTION", "CUDA_CONTEXT_BYTES", "MemoryEstimate",
           "budget_of", "estimate_memory", "reserved_bytes", "step_moments"]

W_FROZEN, W_TRAIN, GRADS, OPT = (Category.WEIGHTS_FROZEN, Category.WEIGHTS_TRAINABLE, Category.GRADIENTS,
                                 Category.OPTIMIZER)
ACTS, LOGITS, TEMPS, INPUTS = Category.ACTIVATIONS, Category.LOGITS, Category.TEMPORARIES, Category.INPUTS


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """The analytic memory budget of one training step (integer bytes throughout; per GPU when sharded).

    Whether it fits a GPU is judged apart, by :class:`memfit.estimate.fits.Target`."""

    spec: RunSpec
    shape: ModelShape
    peak_bytes: int
    peak_phase: str  # "forward" | "backward" | "optimizer"
    peak_moment: str  # the peak moment's label, e.g. "backward: loss"
    components: dict[Category, int]  # alive at the peak, every booked category in Category order
    model_states: ModelStates  # full sizes (one replica), whatever the sharding
    activations: ActivationBytes
    activation_bytes: int  # everything the forward saves for backward (weights excluded)
    moments: tuple[Moment, ...]  # every candidate moment of the step, in step order
    rule_of_thumb_bytes: int
    sharded: ShardedPeak | None = None  # what spec.sharding did to the peak (None without sharding)
    host_bytes: int = 0  # --offload: the checkpoints' copies in host memory, not part of peak_bytes

    @cached_property
    def allocator(self) -> AllocatorReplay | None:
        """CUDA, unsharded: the caching-allocator replay of the estimate's allocation sequence
        (:func:`memfit.estimate.synth_allocations.allocations_of`, under ``spec.alloc_conf``); run on first use
        (tens of milliseconds for a 70B: the advisor's search replays only the runs that fit by their peak)."""
        if self.spec.device != "cuda" or self.sharded is not None:
            return None
        return replay(allocations_of(self.shape, self.spec, self.model_states, self.activations),
                      self.spec.allocator_settings)

    @cached_property
    def reserved_bytes(self) -> int:
        """CUDA: what the caching allocator reserves + the CUDA context (module docstring); CPU: the peak."""
        if self.allocator is None:
            return reserved_bytes(self.peak_bytes, self.spec.device)
        return replayed_reserved_bytes(self.peak_bytes, self.allocator)

    @property
    def model(self) -> str:
        return self.shape.name

    @property
    def per_layer(self) -> dict[str, int]:
        """Saved bytes of one typical block by component (``attention/kernel``, ``mlp/act`` ...)."""
        return dict(self.activations.by_component)

    def breakdown(self) -> dict[str, int]:
        """Hierarchical keys: ``peak/<component>``, ``model_states/...``, ``activations/layer/...``."""
        out = {f"peak/{k}": v for k, v in self.components.items()}
        out["peak/total"] = self.peak_bytes
        out.update(self.model_states.breakdown())
        out.update(self.activations.breakdown())
        out.update({f"moments/{m.label}": m.total for m in self.moments})
        out["reserved"] = self.reserved_bytes
        return out

    @property
    def reserved_source(self) -> str:
        """Where :attr:`reserved_bytes` comes from, in words (the JSON's ``reserved_source``)."""
        if self.spec.device != "cuda":
            return "cpu: the peak"
        if self.allocator is None:
            return "assumed (sharded): peak + 5% + 256 MiB allocator + 512 MiB CUDA context"
        conf = self.spec.alloc_conf or "torch's defaults"
        return ("the caching-allocator replay of the estimate's allocation sequence "
                f"(PYTORCH_CUDA_ALLOC_CONF: {conf}) + 512 MiB CUDA context (assumed)")

    def to_dict(self) -> dict[str, Any]:
        """The estimate's JSON; ``memfit estimate --json`` adds the verdict on ``--gpu``
        (:func:`memfit.estimate.fits.verdict_fields`)."""
        return {
            "model": self.model,
            "spec": self.spec.to_dict(),
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "peak_moment": self.peak_moment,
            "components": {str(k): v for k, v in self.components.items()},
            "model_states": self.model_states.to_dict(),
            "activation_bytes": self.activation_bytes,
            "activations_per_layer": self.per_layer,
            "moments": [m.to_dict() for m in self.moments],
            "reserved_bytes": self.reserved_bytes,
            "reserved_source": self.reserved_source,
            "host_bytes": self.host_bytes,
            "sharding": None if self.sharded is None else self.sharded.to_dict(),
            "rule_of_thumb_bytes": self.rule_of_thumb_bytes,
            "trainable_params": self.model_states.trainable_params,
            "evaluation": eval_summary(self.spec, self.moments),
            # bitsandbytes' paged optimizers: states in CUDA unified memory, outside the allocator and the peak
            "paged_optimizer_bytes": self.model_states.paged_optimizer,
        }


def estimate_memory(shape: ModelShape, spec: RunSpec) -> MemoryEstimate:
    """Predict the peak memory of one training step of ``shape`` under ``spec`` (per GPU with
    ``spec.sharding``); see the module docstring."""
    st = model_states(shape, spec)
    act = estimate_activations(shape, spec)
    return budget_of(shape, spec, st, act, step_moments(shape, spec, st, act))


def budget_of(shape: ModelShape, spec: RunSpec, st: ModelStates, act: ActivationBytes,
              moments: tuple[Moment, ...]) -> MemoryEstimate:
    """The estimate whose step holds ``moments`` (one replica's): sharded per ``spec``, the peak picked."""
    per_gpu, sharded = shard_moments(moments, shape, spec, st)
    top = peak_moment(per_gpu)
    rot = rule_of_thumb_activation_bytes(shape.n_layers, spec.batch, spec.seq, shape.hidden)
    return MemoryEstimate(
        spec=spec, shape=shape, peak_bytes=top.total, peak_phase=top.phase, peak_moment=top.label,
        components=top.components(), model_states=st, activations=act, activation_bytes=act.total,
        moments=per_gpu, rule_of_thumb_bytes=rot, sharded=sharded, host_bytes=act.offloaded,
    )


def replayed_reserved_bytes(peak_bytes: int, allocator: AllocatorReplay) -> int:
    """CUDA's reserved figure from the caching-allocator replay of the estimate's allocation sequence: the CUDA
    context (assumed 512 MiB) + the replay's reserved peak, + the live bytes of the estimate's peak beyond the
    sequence's allocated peak (the moments the coarser sequence leaves out, e.g. a block's backward temporaries
    beyond one tensor, counted as allocated without fragmentation)."""
    missing = max(0, peak_bytes - allocator.allocated_peak_bytes)
    return CUDA_CONTEXT_BYTES + allocator.reserved_peak_bytes + missing


def _lm_head_backward(spec: RunSpec, st: ModelStates, act: ActivationBytes) -> dict[Category, int]:
    """The logits and gradients alive at the backward through lm_head, beside the saved activations: the larger of
    its two instants.

    The fp32 logits' gradient (b*s*V*4) is freed once cast back to the logits' dtype (that instant, with both
    alive, stays below the loss's backward), so the head's matmul backward holds the logits' gradient in their dtype
    (``logits_bytes``) and the weight's gradient. Under autocast (mixed-*) that gradient comes out in the compute
    dtype, the size of the saved weight copy, and is then cast to the fp32 master's: instant A holds the logits'
    gradient + the compute-dtype weight gradient; instant B (the cast) the compute-dtype gradient in place of the
    freed weight copy + the fp32 gradient. Without autocast the matmul's output is the gradient itself.

    Worked example (torch 2.13 CPU steps, ``bench/bench_estimate.py``'s llama row: V = 32,000, h = 128, b*s = 64,
    mixed-bf16, full): logits' gradient 64*32,000*2 = 4,096,000 B; compute-dtype weight gradient 32,000*128*2 =
    8,192,000 B; fp32 gradient 16,384,000 B: A = 12,288,000 B, B = 16,384,000 B. The old single instant (both
    logits copies + the fp32 gradient, 28,672,000 B) put the step's peak here, 2.96% above the measured one.
    Chunked losses (Liger, TRL) compute the head's gradient in their forward: their workspace stays booked."""
    if not act.logits_bytes:  # chunked: the chunk's fp32 logits beside the head's gradient
        return {LOGITS: act.loss_workspace, GRADS: st.grads_head}
    g_cd = st.grads_head // spec.weight_bytes * spec.compute_bytes if spec.is_mixed else 0
    a = {LOGITS: act.logits_bytes, TEMPS: g_cd, GRADS: 0 if g_cd else st.grads_head}
    b = {GRADS: st.grads_head}
    return a if sum(a.values()) >= sum(b.values()) else b


def step_moments(shape: ModelShape, spec: RunSpec, st: ModelStates, act: ActivationBytes) -> tuple[Moment, ...]:
    """The candidate moments of one replica's step, in step order (the module docstring's table)."""
    T = spec.batch * spec.seq
    inputs = 2 * T * INT64_BYTES  # input_ids and labels
    base = {W_FROZEN: st.weights_frozen, W_TRAIN: st.weights_trainable, OPT: st.optimizer, INPUTS: inputs}
    Vf = act.loss_workspace
    blocks = act.layers
    other_saved = act.shared + act.embedding
    seg = act.segment
    n = shape.n_layers
    offload = spec.offload or spec.offload_activations  # with checkpointing: the checkpoints on the host
    host_copy_back = offload and spec.device == "cuda"  # unpack copies the checkpoint back to the device
    # --offload-activations: the loss's log-probabilities are on the device while the loss runs, then on the host;
    # its backward reads them back (CUDA: a device copy; a CPU run reads the host copy itself)
    loss_back = act.loss_offloaded if host_copy_back else 0
    resid_grad = T * shape.hidden * (4 if spec.is_quantised else spec.weight_bytes)
    G = st.gradients
    g_head = st.grads_head + st.grads_other
    # --layers-to-transform: the adapted layers' gradients only (else the typical block's times L, as before)
    g_layers = st.grads_blocks if spec.layers_to_transform else st.grads_per_layer * n
    acts_fwd = blocks + other_saved + act.head
    upcast = act.logits_bytes + (Vf if act.logits_bytes != Vf else 0)  # logits + their fp32 copy
    out = [
        # forward, at the loss: logits in the compute dtype + fp32 copy + log-softmax output
        Moment(phase="forward", label="forward: loss",
               parts={**base, ACTS: acts_fwd + act.hidden_live + act.forward_cached,
                      LOGITS: upcast + act.loss + act.loss_offloaded}),
        # backward at the loss: log-softmax output + its gradient + the gradient of the logits (fp32)
        Moment(phase="backward", label="backward: loss",
               parts={**base, ACTS: acts_fwd, LOGITS: act.loss + loss_back + 2 * Vf}),
        # backward through lm_head: the logits' gradient and the weight's (_lm_head_backward)
        Moment(phase="backward", label="backward: lm_head",
               parts={**base, ACTS: acts_fwd, **_lm_head_backward(spec, st, act)}),
    ]
    if act.head_table:  # a tied --trainable-tokens head's matmul backward (estimate/adapter.py): from d(logits) in the
        # compute dtype, the dense gradient of the merged table it saw and d(x), made at once
        out.append(Moment(phase="backward", label="backward: lm_head matmul",
                          parts={**base, ACTS: acts_fwd, LOGITS: act.logits_bytes, GRADS: st.grads_head,
                                 TEMPS: act.head_table_used + T * shape.embed_dim * spec.compute_bytes}))
    if act.head_table != act.head_table_used:  # tied --trainable-tokens under autocast (estimate/adapter.py)
        # the end of the lm_head's forward: the merged table beside its compute-dtype copy, the logits, the input
        out.insert(0, Moment(phase="forward", label="forward: lm_head merged table",
                             parts={**base, ACTS: blocks + other_saved + act.head, TEMPS: act.head_table_forward}))
        # after the matmul's backward (its saved copies freed): the gradient cast to the table's dtype beside
        # the compute-dtype one, and d(x) in the compute dtype
        out.append(Moment(phase="backward", label="backward: lm_head merged table",
                          parts={**base, ACTS: acts_fwd - act.head_table_saved, GRADS: st.grads_head,
                                 TEMPS: act.head_table_used + act.head_table + T * shape.embed_dim
                                 * spec.compute_bytes}))
    # backward of the last block: the other blocks' saved tensors (or the checkpoints, plus the segment
    # being recomputed) + the block's own backward (saved + gradients at its widest op)
    if act.plain_blocks:
        # every-k: the last block (index L-1) is checkpointed when k divides L-1, otherwise it kept everything
        last_ckpt = (n - 1) % spec.checkpoint_every == 0
        others = act.layers - (act.input_saved if last_ckpt else act.per_layer)
        last_grads = st.grads_per_layer
    elif seg:
        # the recomputed block saves its own input, which is the checkpoint itself: count it once. With
        # --offload the checkpoint is on the host: CUDA unpacks a device copy (the block's saved input, counted in
        # its backward); a CPU run recomputes from the host tensor itself (no device bytes: take it out)
        others = act.checkpoints + (min(seg, n) - 1) * act.per_layer - (0 if host_copy_back else act.input_saved)
        last_grads = st.grads_per_layer * min(seg, n)
    else:
        others = blocks - act.per_layer
        last_grads = st.grads_per_layer
    bwd_per = act.backward_per if n > 1 else act.backward_first
    out.append(Moment(phase="backward", label="backward: last block",
                      parts={**base, ACTS: others + other_saved, GRADS: g_head + last_grads,
                             TEMPS: bwd_per + resid_grad}))
    if spec.sharding in FSDP2 and not act.plain_blocks and not spec.layers_to_transform and (
            not seg or (seg == 1 and not spec.offload)):  # FSDP2's prefetch + buffer; one checkpoint a block done
        out.extend(middle_blocks(out[-1], n, act.layer_input if seg else act.per_layer, st.grads_per_layer))
    if act.forward_temps:  # DoRA's weight norm in the last block's forward, and again in its recompute
        before = act.checkpoints if seg else blocks - act.per_layer + act.forward_saved
        out.insert(0, Moment(phase="forward", label="forward: last block",
                             parts={**base, ACTS: before + other_saved, TEMPS: act.forward_temps}))
        if seg:
            out.append(Moment(phase="backward", label="backward: last block recompute",
                              parts={**base, ACTS: others + other_saved + act.forward_saved,
                                     GRADS: g_head + last_grads - st.grads_per_layer,
                                     TEMPS: act.forward_temps + resid_grad}))
    # backward of the first block: its own backward + every block's gradients
    first_others = act.layer_input - act.input_saved if seg and not offload else 0
    if seg and offload:  # a leaf block-0 input stays on the device; the recompute input as above
        first_others = act.leaf_input - (0 if host_copy_back else act.input_saved)
    if seg and seg > 1:
        first_others += (min(seg, n) - 1) * act.per_layer
    if act.forward_temps and seg and n > 1:  # block 0's recompute: every later block's gradients exist by then
        out.append(Moment(phase="backward", label="backward: first block recompute",
                          parts={**base, ACTS: first_others + other_saved + act.forward_saved,
                                 GRADS: g_head + g_layers - st.grads_per_layer,
                                 TEMPS: act.forward_temps + resid_grad}))
    out.append(Moment(phase="backward", label="backward: first block",
                      parts={**base, ACTS: first_others + other_saved, GRADS: g_head + g_layers,
                             TEMPS: act.backward_first + resid_grad}))
    # end of backward: embedding gradient. Tied: the head's weight gradient waits in autograd's input buffer for
    # the embedding's, and their sum is a third tensor of that size before AccumulateGrad takes it (measured on
    # CPU steps, torch 2.13: 3 x the embedding's bytes alive beside the other gradients); G books one of them
    tied = shape.tie_embeddings and spec.method == "full"
    tied_extra = 2 * shape.vocab * shape.embed_dim * spec.weight_bytes if tied else 0  # the token embedding only
    if trainable_tokens(shape, spec):  # the dense (V, h) gradient of the merged table (estimate/adapter.py)
        tied_extra += shape.vocab * shape.embed_dim * (4 if spec.is_quantised else spec.weight_bytes)
    out.append(Moment(phase="backward", label="backward: embeddings", parts={**base, GRADS: G, TEMPS: tied_extra}))
    if spec.sharding in FSDP2 and n >= 2:
        # FSDP2 gathers the last block while the one before's all-gather output is still kept: every other block's
        # saved tensors and the last block's input (its own saved tensors not yet made), no head, no logits
        before_last = blocks - (0 if seg else act.per_layer - act.input_saved)
        out.insert(0, Moment(phase="forward", label=LAST_GATHER, parts={**base, ACTS: before_last + other_saved}))
    if spec.grad_accum > 1:
        out = [_accumulating(m, G) for m in out]
    out.append(Moment(phase="optimizer", label="optimizer: step",
                      parts={**base, GRADS: G, TEMPS: optimizer_temporaries(st, spec)}))
    if spec.loss == "trl":
        out = _trl_head(out, shape, spec, st, act)
    if spec.eval_batch is not None:  # the Trainer's evaluation, between optimizer steps (estimate/evaluation.py)
        std = act if act.logits_bytes else estimate_activations(shape, spec.with_(loss="standard"))
        out.extend(eval_moments(shape, spec, {W_FROZEN: st.weights_frozen, W_TRAIN: st.weights_trainable,
                                              OPT: st.optimizer},
                                logits_itemsize=std.logits_bytes // (T * shape.vocab),
                                hidden_itemsize=4 if spec.method == "qlora" else spec.weight_bytes))
    return tuple(out)


def _trl_head(moments: list[Moment], shape: ModelShape, spec: RunSpec, st: ModelStates,
              act: ActivationBytes) -> list[Moment]:
    """TRL's fused LM head at the loss (:mod:`memfit.estimate.trl_loss`): after the forward it keeps the scored
    positions' hidden states, targets, log_z and entropy, and its mm buffer (min(N, 4096) x 32768 in the compute
    dtype) is alive inside it; the backward at the loss holds :func:`trl_loss_bytes`. The lm_head's own backward runs
    inside that one (its moment carries no logits)."""
    n = trl_scored_tokens(spec)
    logits = {"forward: loss": trl_forward_bytes(spec, shape) + min(n, TRL_TOKEN_CHUNK) * TRL_VOCAB_CHUNK
              * spec.compute_bytes,
              # --offload-activations on a CPU run: the backward reads the host copies themselves (CUDA copies back)
              "backward: loss": trl_loss_bytes(spec, shape, head_trained=st.grads_head > 0) - (
                  act.loss_offloaded if spec.device != "cuda" else 0),
              "backward: lm_head": 0}
    return [Moment(phase=m.phase, label=m.label, parts={**m.parts, LOGITS: logits[m.label]})
            if m.label in logits else m for m in moments]


def _accumulating(moment: Moment, grads: int) -> Moment:
    """``moment`` in a later micro-batch of a gradient-accumulation step: the earlier micro-batches'
    gradients stay allocated through its forward and backward (autograd adds the new ones into them in
    place), so every gradient is alive, ``grads`` bytes, not only those made so far.

    Worked: a full fine-tune in fp32 with 220,480 parameters (881,920 B of gradients) at ``grad_accum 2``:
    the forward at the loss holds 0 B of gradients in the first micro-batch, 881,920 B in the second.
    """
    if moment.phase not in ("forward", "backward"):
        return moment
    parts = dict(moment.parts)
    parts[GRADS] = max(parts.get(GRADS, 0), grads)
    return Moment(phase=moment.phase, label=moment.label, parts=parts)
