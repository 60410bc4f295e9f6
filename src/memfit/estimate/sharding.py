"""Per-GPU bytes when model states are spread over N data-parallel GPUs (DDP, ZeRO-1, FSDP2 / ZeRO-2/3, HSDP).

Each ``--sharding`` is modelled as torch 2.13.0 runs it and proven on real multi-process steps
(``memfit measure --gpus N --sharding ...``, bench/RESULTS.md ``## sharding``):

==========  ============================================================================================
``none``    one replica, what a single GPU holds
``ddp``     ``DistributedDataParallel``: a full replica + its gradient buckets (a second copy of the
            gradients, ``gradient_as_bucket_view=False``); on CPU gloo all-reduces a copy of the last bucket
``zero1``   DDP + ``ZeroRedundancyOptimizer``: optimizer states partitioned by whole tensors (the busiest
            rank holds ``max(total / N, the largest tensor's)``); DeepSpeed ``stage: 1``
``zero2``   FSDP2 ``fully_shard(reshard_after_forward=False)`` (SHARD_GRAD_OP): weights, gradients and
            optimizer states 1/N at rest; the layers gathered in the forward stay until their backward
``zero3``   FSDP2 ``reshard_after_forward=True`` (FULL_SHARD, = ``fsdp``); DeepSpeed ``stage: 3``
``hsdp``    ``fsdp`` within a node (N / nodes GPUs), replicated across ``--nodes``
==========  ============================================================================================

FSDP2 units are each decoder layer and the root (embeddings, final norm, lm_head) under ``--fsdp-wrap layers``
(torchtitan's); ``--fsdp-wrap accelerate`` models accelerate 1.15.0's (the Trainer's) units:
:mod:`memfit.estimate.fsdp_wrap`. Beside its 1/N shards a
rank holds, per moment (:func:`fsdp2_moment` names the torch source): the root's weights in full through
forward and backward; the layer computing plus ``prefetch`` gathered ahead in the backward (beside the last
reduce-scatter's input in the middle layers: :func:`memfit.estimate.fsdp_grads.middle_blocks`), and the last
layer's all-gather output in the forward (every layer with ``reshard_after_forward=False``), and when the last
layer is gathered the one before's all-gather output beside its own output and weights (:data:`LAST_GATHER`); a
layer's gradients in full until their reduce-scatter (layer by layer under ``--layers-to-transform``:
:mod:`memfit.estimate.fsdp_grads`); at the root's reduce-scatter its gradients twice (the
gradients and the input copy) and, measured, with tied embeddings the root's gathered weights, untied the
input embedding's gathered weight and the reduce-scatter's 1/N output (scaled Llama 3.2 and Pythia over 2 and
4 ranks: RESULTS ``## sharding``). The forward's first all-gathers hold the root's output buffer and weights
together, and a root resharded after the forward is gathered so again at the backward's start (the peak of a
LoRA run). Under mixed-bf16 (``MixedPrecisionPolicy``, measured) the gathered weights are bf16, autocast copies
none of them, and the reduce-scatters run in the reduce dtype. The optimizer step holds shards only; its
temporaries are per shard too.
Activations, logits and inputs are per micro-batch and never sharded. ``--offload-optimizer`` moves the
optimizer states (and its step) to the host, ``--offload-params`` the weight and gradient shards
(CPUOffloadPolicy); what moves is reported as host bytes per rank.

Worked: a full fine-tune of Llama-3.1-8B (P = 8,030,261,248 parameters) in bf16 with torch's AdamW
(moments in bf16) on CUDA: the optimizer step holds 2 B weights + 2 B gradients + 4 B moments + 2 B of
foreach temporaries = 10 B/param = 80.3 GB. On N = 8 GPUs under zero3 each GPU holds 10P / 8 =
10,037,826,560 B of them in the step, plus the batch's inputs; the peak is at the backward's start, where
the root (2 x 128,256 x 4,096 x 2 B + the norm) and the prefetched last block (218,112,000 x 2 B) are
gathered: 2,537,578,496 B on top of the shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from memfit.estimate.category import Category
from memfit.estimate.fsdp_grads import block_grads
from memfit.estimate.fsdp_wrap import LAST_GATHER, accelerate_untied, tied_mixed_end
from memfit.estimate.moments import Moment, Phase, peak_moment
from memfit.estimate.params import count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec, Sharding
from memfit.estimate.states import ModelStates

SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)
LADDER: tuple[Sharding, ...] = ("none", "zero1", "zero2", "zero3")
"""The stages ``memfit fit --gpus N`` climbs, least communication first (a DDP replica, then ZeRO-1/2/3)."""

_W = (Category.WEIGHTS_TRAINABLE, Category.WEIGHTS_FROZEN)
_STATES = frozenset({Category.OPTIMIZER, Category.GRADIENTS, *_W})
SHARDED: dict[Sharding, frozenset[Category]] = {
    "none": frozenset(),
    "ddp": frozenset(),
    "zero1": frozenset({Category.OPTIMIZER}),
    "zero2": frozenset({Category.OPTIMIZER, Category.GRADIENTS}),
    "zero3": _STATES,
    "fsdp": _STATES,
    "hsdp": _STATES,
}
"""The model-state categories each ZeRO stage shards (DeepSpeed's stages; :func:`shard_moment`). The estimate
runs zero2 as FSDP2 does (``reshard_after_forward=False``, torch's SHARD_GRAD_OP): weights sharded at rest too,
gathered from the forward to the backward (:func:`fsdp2_moment`)."""

FSDP2: frozenset[Sharding] = frozenset({"zero2", "zero3", "fsdp", "hsdp"})
GATHERED_BLOCKS = 2  # the block being computed + the one prefetched (FSDP forward/backward prefetch)


def shard_group(spec: RunSpec) -> int:
    """GPUs the states are divided over: all of them, or one node's under hsdp (replicated across nodes)."""
    return spec.gpus // spec.nodes if spec.sharding == "hsdp" else spec.gpus


def reshards_after_forward(spec: RunSpec) -> bool:
    """FSDP2's ``reshard_after_forward``: the flag, else False for zero2 and True otherwise."""
    return spec.reshard_after_forward if spec.reshard_after_forward is not None else spec.sharding != "zero2"


def sharded_categories(sharding: Sharding, phase: Phase) -> frozenset[Category]:
    """What ``sharding`` divides by N at a moment of ``phase``: its model states, and in the optimizer step
    that step's temporaries too (each GPU updates its own partition)."""
    out = SHARDED[sharding]
    if phase == "optimizer" and Category.OPTIMIZER in out:
        out = out | {Category.TEMPORARIES}
    return out


def block_weight_bytes(shape: ModelShape, spec: RunSpec) -> int:
    """Bytes of one decoder block's weights as stored (4-bit base: 0.5 B per element, 8-bit: 1 B, else the
    precision)."""
    per_layer = count_params(shape).per_layer
    if spec.method == "qlora":
        return per_layer // 2
    if spec.method == "int8-lora":
        return per_layer
    return per_layer * spec.weight_bytes


def gathered_weights(shape: ModelShape, spec: RunSpec) -> dict[Category, int]:
    """ZeRO-3's gathered blocks (the prefetched one and the one computing), booked as the weights they are
    (frozen for an adapter run); empty otherwise. FSDP2's own per-moment gathers: :func:`fsdp2_moment`."""
    if spec.sharding not in FSDP2 or not reshards_after_forward(spec):
        return {}
    category = Category.WEIGHTS_FROZEN if spec.is_adapter else Category.WEIGHTS_TRAINABLE
    return {category: min(shape.n_layers, 1 + spec.prefetch) * block_weight_bytes(shape, spec)}


def shard_moment(moment: Moment, sharding: Sharding, gpus: int, gather: dict[Category, int]) -> Moment:
    """``moment`` as one of ``gpus`` GPUs holds it under ``sharding``, plus ``gather``.

    >>> m = Moment(phase="backward", label="backward: x",
    ...            parts={Category.GRADIENTS: 40, Category.OPTIMIZER: 81, Category.ACTIVATIONS: 50})
    >>> {str(c): v for c, v in shard_moment(m, "zero2", 4, {}).parts.items()}
    {'gradients': 10, 'optimizer': 21, 'activations': 50}
    """
    cut = sharded_categories(sharding, moment.phase)
    parts = {c: (-(-v // gpus) if c in cut else v) for c, v in moment.parts.items()}
    for c, v in gather.items():
        parts[c] = parts.get(c, 0) + v
    return Moment(phase=moment.phase, label=moment.label, parts=parts)


def unit_weight_bytes(shape: ModelShape, spec: RunSpec, st: ModelStates) -> tuple[int, int]:
    """(one decoder layer's, the rest's: embeddings, final norm, lm_head) weight bytes as FSDP2 gathers them: in
    bf16 under mixed-bf16 (``MixedPrecisionPolicy(param_dtype=bfloat16)``, measured: RESULTS ``## sharding``)."""
    layer_w = block_weight_bytes(shape, spec)
    root_w = max(0, st.weights_trainable + st.weights_frozen - shape.n_layers * layer_w)
    if spec.precision == "mixed-bf16":
        return layer_w * 2 // spec.weight_bytes, root_w * 2 // spec.weight_bytes
    return layer_w, root_w


def first_gather_moment(moment: Moment, shape: ModelShape, spec: RunSpec, st: ModelStates) -> Moment | None:
    """The forward's first all-gathers on one FSDP2 rank, ``moment`` being the step's first: the root's (or the
    tied tail's) all-gather output, kept in ``comm_ctx.all_gather_state`` until the next unit's has been waited
    on, and the weights copied out of it, then the first layer's output and weights beside them; the 1/N states
    and the inputs, nothing saved yet (measured: LoRA, scaled Pythia, zero2 over 2 ranks, 131,365,976 B: 2 x
    (the root's + a layer's fp32 weights) on top of the shards, + 107,528 B of the embedding's output).
    None where the first unit is the untied input embedding alone (``--fsdp-wrap accelerate``: the tail's
    gather at the loss is larger, :func:`accelerate_untied`)."""
    if spec.fsdp_wrap == "accelerate" and not shape.tie_embeddings:
        return None
    layer_w, root_w = unit_weight_bytes(shape, spec, st)
    n_s = shard_group(spec)
    keep = (Category.WEIGHTS_TRAINABLE, Category.WEIGHTS_FROZEN, Category.OPTIMIZER, Category.GRADIENTS,
            Category.INPUTS)
    parts = {c: (v if c == Category.INPUTS else -(-v // n_s)) for c, v in moment.parts.items() if c in keep}
    wcat = Category.WEIGHTS_FROZEN if spec.is_adapter else Category.WEIGHTS_TRAINABLE
    parts[wcat] = parts.get(wcat, 0) + 2 * (root_w + min(1, shape.n_layers) * layer_w)
    return Moment(phase="forward", label="forward: first all-gather", parts=parts)


def fsdp2_moment(moment: Moment, shape: ModelShape, spec: RunSpec, st: ModelStates) -> Moment:
    """``moment`` on one rank of FSDP2 (``fully_shard`` per decoder layer, then the root; torch 2.13.0).

    What each rank holds beside its 1/N shards (torch/distributed/fsdp/_fully_shard, 2.13.0):

    - the root's weights (embeddings, final norm, lm_head) in full through the forward and the backward (the
      root is gathered first and is needed again at the backward's start);
    - the decoder layers gathered: forward, at the loss (computed inside the root's forward): the last layer's
      all-gather output, kept in ``comm_ctx.all_gather_state`` until the root's post-forward frees it (one
      layer), or every layer (still gathered) plus that buffer with ``reshard_after_forward=False``; backward:
      the layer computing and ``prefetch`` ahead (every layer not yet done without resharding after forward);
      none in the optimizer step;
    - gradients: the root's in full until its reduce-scatter at the end of the backward; a layer's in full
      from its backward to its reduce-scatter, whose input buffer (one layer's gradients) is kept until the next
      (``reduce_scatter_states``, at most 1); the layers already reduced as 1/N shards;
    - at the root's reduce-scatter (the backward's last moment): its full gradients and the input copy.
    """
    n_s, n = shard_group(spec), shape.n_layers
    layer_w, root_w = unit_weight_bytes(shape, spec, st)
    cut = sharded_categories("zero3", moment.phase)  # every FSDP2 stage shards all the states at rest
    parts = {c: (-(-v // n_s) if c in cut else v) for c, v in moment.parts.items()}
    wcat = Category.WEIGHTS_FROZEN if spec.is_adapter else Category.WEIGHTS_TRAINABLE
    keep = not reshards_after_forward(spec)
    layer_g = st.layer_grads(n)
    g_root = st.gradients - sum(layer_g)
    grads = moment.parts.get(Category.GRADIENTS, 0)
    gathered = 0
    if spec.fsdp_wrap == "accelerate" and not shape.tie_embeddings:
        gathered = accelerate_untied(moment, shape, spec, st, parts, layer_w, root_w, keep=keep)
    elif moment.label == LAST_GATHER:
        # the last layer's all-gather output and the weights copied out of it, beside the layer before's output
        # (kept in comm_ctx.all_gather_state until this one has been waited on) and the root; with
        # reshard_after_forward=False every earlier layer too (traced and measured: LoRA, scaled Llama 3.2 of 4
        # layers and vocab 1,024 over 2 ranks, 24,298,536 B at layers.3's copy-out: 3 x 3,803,136 B of layers)
        gathered = root_w + (n + 2 if keep else 3) * layer_w
    elif moment.phase == "forward":
        gathered = root_w + (n + 1 if keep else 1) * layer_w
    elif moment.phase == "backward" and moment.label.endswith("embeddings"):
        # the root's reduce-scatter: its gradients in full and their input copy; a tied root keeps its gathered
        # weights, an untied one the input embedding's and the reduce-scatter output (measured, module docstring)
        parts[Category.GRADIENTS] = 2 * g_root + -(-sum(layer_g) // n_s)
        if parts.get(Category.TEMPORARIES):  # a tied embedding's backward is over: one embedding-sized term left
            parts[Category.TEMPORARIES] = st.grads_embed
        if shape.tie_embeddings and spec.method == "full" and spec.precision == "mixed-bf16":
            gathered = tied_mixed_end(parts, spec, st, n, root_w)
        elif shape.tie_embeddings or spec.method != "full":
            gathered = root_w
        else:  # a full fine-tune's embedding weight weighs its gradient (gathered in bf16 under mixed-bf16)
            gathered = st.grads_embed * 2 // spec.weight_bytes if spec.precision == "mixed-bf16" else st.grads_embed
            parts[Category.GRADIENTS] += -(-g_root // n_s)
    elif moment.phase == "backward":
        blocks = block_grads(moment, grads - st.grads_head - st.grads_other, layer_g)
        done = blocks.done
        if done == 0:  # the head's backward: every layer still gathered, or the root's prefetch of the last
            layers = n if keep else min(n, spec.prefetch)
        else:  # the layer computing + those ahead still gathered (all, or the prefetched)
            layers = 1 + (n - done if keep else min(spec.prefetch, n - done))
        gathered = root_w + layers * layer_w
        if done == 0 and moment.label.endswith("loss") and spec.fsdp_wrap == "layers" and not keep \
                and spec.loss == "standard":
            # the root, resharded after the forward (reshard_after_forward=True given to it too), is gathered
            # again at the backward's start: its all-gather output and its weights both alive, the loss's saved
            # output beside them, before the loss's backward makes its b*s*V*4 B terms (measured: LoRA, scaled
            # Pythia over 2 ranks, 143,224,940 B: 2 x the root's fp32 weights + one fp32 logits-sized tensor)
            saved = max(0, parts.get(Category.LOGITS, 0) - 2 * spec.batch * spec.seq * shape.vocab * 4)
            if 2 * root_w + saved > gathered + parts.get(Category.LOGITS, 0):
                parts[Category.LOGITS], gathered = saved, 2 * root_w
        parts[Category.GRADIENTS] = grads - blocks.booked + blocks.on_rank(n_s)
    parts[wcat] = parts.get(wcat, 0) + gathered
    return Moment(phase=moment.phase, label=moment.label, parts=parts)


def replicated_moment(moment: Moment, shape: ModelShape, spec: RunSpec, st: ModelStates) -> Moment:
    """``moment`` on one rank of DDP or torch's ZeRO-1 (DDP + ``ZeroRedundancyOptimizer``), torch 2.13.0.

    DDP (``gradient_as_bucket_view=False``, its default) allocates its gradient buckets at construction: one
    more copy of every trainable gradient, alive for the whole run (``bucket_cap_mb`` splits them, it does not
    shrink them). ZeroRedundancyOptimizer partitions whole parameters over the ranks, largest first, each to the
    least loaded rank: the busiest rank holds ``max(total / N, the largest tensor's state)`` of optimizer state
    (a tied 128,256 x 2,048 embedding alone can outweigh half the rest). On CPU, gloo's all-reduce of the last
    bucket (the embeddings', ready at the end of the backward) works on a copy of it: + that bucket (the largest
    tensor, or ``bucket_mb`` MiB) at the backward's last moment (measured: DDP over 2 gloo ranks, torch 2.13.0).
    """
    parts = dict(moment.parts)
    parts[Category.GRADIENTS] = parts.get(Category.GRADIENTS, 0) + st.gradients
    if spec.device == "cpu" and moment.label.endswith("embeddings"):  # gloo all-reduces a copy of the bucket
        # after the embedding's backward has finished (its hook fires on the summed gradient): the copy and
        # the moment's own transient (a tied embedding's two gradient terms) are not alive together
        copy = min(max(st.largest_tensor, min(spec.bucket_mb * 2**20, st.gradients)), st.gradients)
        parts[Category.TEMPORARIES] = max(parts.get(Category.TEMPORARIES, 0), copy)
    if spec.sharding == "zero1" and st.trainable_params:
        opt = parts.get(Category.OPTIMIZER, 0)
        per_param = opt / st.trainable_params
        largest = int(per_param * max(shape.vocab * shape.hidden, 0)) if spec.method == "full" else 0
        parts[Category.OPTIMIZER] = max(-(-opt // spec.gpus), min(opt, largest))
        if moment.phase == "optimizer" and spec.device == "cuda":  # foreach over its partition; a CPU step
            t = parts.get(Category.TEMPORARIES, 0)  # loops tensor by tensor: the largest tensor's, unchanged
            parts[Category.TEMPORARIES] = -(-t // spec.gpus)
    return Moment(phase=moment.phase, label=moment.label, parts=parts)


GPUS_PER_NODE = 8  # an HGX / DGX node (8 x H100 / A100 SXM); --nodes says otherwise


def nodes_needed(spec: RunSpec) -> int:
    """Machines the run spans: ``--nodes`` (which ``--gpus-per-node`` sets), or ``gpus / 8`` rounded up (8 GPUs
    per node) when neither is given."""
    if spec.gpus_per_node is not None:
        return spec.nodes
    return max(spec.nodes, -(-spec.gpus // GPUS_PER_NODE))


def communication_bytes(shape: ModelShape, spec: RunSpec) -> dict[str, int]:
    """Bytes each step's collectives carry (the full tensors gathered or reduced, per optimizer step).

    ddp: an all-reduce of every gradient; zero1 (torch's ZeroRedundancyOptimizer): the same, plus each rank's
    updated partition broadcast (an all-gather of the weights); FSDP2: the weights all-gathered in the forward and,
    resharded after it, again in the backward (in bf16 under mixed-bf16's MixedPrecisionPolicy), the gradients
    reduce-scattered (fp32 reduce under mixed-bf16); hsdp adds an all-reduce of each node's gradient shard across
    the nodes; accelerate's units (``--fsdp-wrap accelerate``) gather their tail [norm, lm_head] once. Worked:
    Llama-3.1-8B bf16 full, fsdp: all-gather 2 x 2P = 32,121,044,992 B, reduce-scatter 2P =
    16,060,522,496 B (P = 8,030,261,248).
    """
    from memfit.estimate.states import model_states

    st = model_states(shape, spec)
    w = st.weights_trainable + st.weights_frozen
    g = st.gradients
    if spec.precision == "mixed-bf16":  # gathered in bf16, reduced in fp32
        w = w * 2 // spec.weight_bytes
    out = {"all_gather_bytes": 0, "reduce_scatter_bytes": 0, "all_reduce_bytes": 0}
    if spec.sharding in ("ddp", "zero1", "none") and spec.gpus > 1:
        out["all_reduce_bytes"] = g
        if spec.sharding == "zero1":
            out["all_gather_bytes"] = w
    elif spec.sharding in FSDP2:
        out["all_gather_bytes"] = w * (2 if reshards_after_forward(spec) else 1)
        if spec.fsdp_wrap == "accelerate" and reshards_after_forward(spec):  # its tail is gathered once
            c = count_params(shape)
            tail = c.final_norm + c.lm_head + (c.embeddings if shape.tie_embeddings else 0)
            out["all_gather_bytes"] -= w * tail // max(1, c.total)
        out["reduce_scatter_bytes"] = g
        if spec.sharding == "hsdp":
            out["all_reduce_bytes"] = -(-g // shard_group(spec))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardedPeak:
    """How sharding changed the step's peak: per GPU against the unsharded replica."""

    sharding: Sharding
    gpus: int
    unsharded_peak_bytes: int  # one full replica's peak (what ``--sharding none`` gives)
    sharded_away_bytes: int  # bytes of the per-GPU peak moment each GPU no longer holds
    gather_bytes: int  # FSDP2's gathered weights at the peak (the root, the layers computing and prefetched)
    nodes: int = 1
    host_bytes: int = 0  # states kept in host memory per rank (--offload-params / --offload-optimizer)

    def to_dict(self) -> dict[str, Any]:
        return {"sharding": self.sharding, "gpus": self.gpus, "nodes": self.nodes,
                "unsharded_peak_bytes": self.unsharded_peak_bytes, "sharded_away_bytes": self.sharded_away_bytes,
                "gather_bytes": self.gather_bytes, "host_bytes": self.host_bytes}


def offload(moment: Moment, spec: RunSpec, st: ModelStates) -> tuple[Moment, int]:
    """``moment`` with the offloaded states moved to the host: (what stays on the GPU, host bytes).

    ``--offload-optimizer``: the optimizer states (and, in the step, its temporaries: the step runs on the host);
    ``--offload-params`` (FSDP2 ``CPUOffloadPolicy``): the 1/N shards of the weights and of the gradients.
    """
    parts = dict(moment.parts)
    host = 0
    if spec.cpu_offload_optimizer:
        for c in (Category.OPTIMIZER, *((Category.TEMPORARIES,) if moment.phase == "optimizer" else ())):
            host += parts.pop(c, 0)
    if spec.cpu_offload_params:
        n_s = shard_group(spec)
        for c, full in ((Category.WEIGHTS_TRAINABLE, st.weights_trainable), (Category.WEIGHTS_FROZEN,
                        st.weights_frozen), (Category.GRADIENTS, st.gradients)):
            take = min(parts.get(c, 0), -(-full // n_s))
            parts[c] = parts.get(c, 0) - take
            host += take
    return Moment(phase=moment.phase, label=moment.label, parts=parts), host


def shard_moments(moments: tuple[Moment, ...], shape: ModelShape, spec: RunSpec,
                  st: ModelStates | None = None) -> tuple[tuple[Moment, ...], ShardedPeak | None]:
    """Every moment per GPU under ``spec.sharding`` over ``spec.gpus`` GPUs, and what that did to the peak
    (None, and the moments unchanged, without sharding)."""
    if spec.sharding == "none":
        return moments, None
    if st is None:
        from memfit.estimate.states import model_states

        st = model_states(shape, spec)
    if spec.sharding in FSDP2:
        per_gpu = tuple(fsdp2_moment(m, shape, spec, st) for m in moments)
        first = first_gather_moment(moments[0], shape, spec, st)
        if first is not None:  # its unsharded counterpart: the step's first moment
            moments, per_gpu = (moments[0], *moments), (first, *per_gpu)
    elif spec.sharding in ("ddp", "zero1"):
        per_gpu = tuple(replicated_moment(m, shape, spec, st) for m in moments)
    else:
        per_gpu = tuple(shard_moment(m, spec.sharding, spec.gpus, {}) for m in moments)
    host = 0
    if spec.cpu_offload_params or spec.cpu_offload_optimizer:
        moved = [offload(m, spec, st) for m in per_gpu]
        per_gpu = tuple(m for m, _ in moved)
        host = max(h for _, h in moved)
    top = peak_moment(per_gpu)
    before = moments[per_gpu.index(top)]
    w_full = st.weights_trainable + st.weights_frozen
    w_top = top.parts.get(Category.WEIGHTS_TRAINABLE, 0) + top.parts.get(Category.WEIGHTS_FROZEN, 0)
    gathered = max(0, w_top - -(-w_full // shard_group(spec))) if spec.sharding in FSDP2 else 0
    return per_gpu, ShardedPeak(sharding=spec.sharding, gpus=spec.gpus, nodes=spec.nodes,
                                unsharded_peak_bytes=peak_moment(moments).total,
                                sharded_away_bytes=max(0, before.total - top.total), gather_bytes=gathered,
                                host_bytes=host)
