"""Per-GPU bytes when model states are sharded over N data-parallel GPUs (ZeRO / FSDP).

ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054) partitions the model states of data parallelism over the
N GPUs; FSDP is PyTorch's implementation of the same idea:

==========  ==================================  =============================================================
stage       sharded over N (each GPU holds 1/N)  PyTorch / DeepSpeed name
==========  ==================================  =============================================================
``none``    nothing (plain DDP: every GPU        ``DistributedDataParallel``
            holds a full replica)
``zero1``   optimizer states                    DeepSpeed ``stage: 1``
``zero2``   + gradients                         DeepSpeed ``stage: 2``; FSDP ``SHARD_GRAD_OP``
``zero3``   + weights (frozen and trainable)    DeepSpeed ``stage: 3``; FSDP ``FULL_SHARD``
==========  ==================================  =============================================================

Activations, logits, inputs and backward temporaries are per micro-batch and are never sharded; the
optimizer step's temporaries are (from ``zero1`` on, each GPU updates only its partition). Under ZeRO-3
each block's weights are gathered in full just before they are used (and again in the backward), and FSDP
prefetches the next block while computing the current one, so two blocks' full weights are alive on top
of the shards. Per moment of the step (:class:`~memfit.estimate.moments.Moment`), by category c:

    per_gpu(c) = ceil(bytes_c / N) if c is sharded at that moment's phase, else bytes_c
    + gather   = 2 x (weight bytes of one decoder block)     [zero3 only, booked as weights]

and the per-GPU peak is the largest per-GPU moment: sharding can move the peak to another moment (sharding
the optimizer shrinks the optimizer step, not the forward). Communication buckets (DeepSpeed's
``reduce_bucket_size``, FSDP's flat-parameter padding) are not modelled.

Worked: a full fine-tune of Llama-3.1-8B (P = 8,030,261,248 parameters) in bf16 with torch's AdamW
(moments in bf16) on CUDA: the optimizer step holds 2 B weights + 2 B gradients + 4 B moments + 2 B of
foreach temporaries = 10 B/param = 80.3 GB. On N = 8 GPUs under zero3 each GPU holds 10P / 8 =
10,037,826,560 B of them, plus 2 blocks x 218,112,000 params x 2 B = 872,448,000 B gathered, plus the
batch's inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from memfit.estimate.category import Category
from memfit.estimate.moments import Moment, Phase, peak_moment
from memfit.estimate.params import count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec, Sharding

SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)

_W = (Category.WEIGHTS_TRAINABLE, Category.WEIGHTS_FROZEN)
SHARDED: dict[Sharding, frozenset[Category]] = {
    "none": frozenset(),
    "zero1": frozenset({Category.OPTIMIZER}),
    "zero2": frozenset({Category.OPTIMIZER, Category.GRADIENTS}),
    "zero3": frozenset({Category.OPTIMIZER, Category.GRADIENTS, *_W}),
}
"""The model-state categories each stage shards, in every phase of the step."""

GATHERED_BLOCKS = 2  # the block being computed + the one prefetched (FSDP forward/backward prefetch)


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
    """ZeRO-3's gathered blocks, booked as the weights they are (frozen for an adapter run); empty otherwise."""
    if spec.sharding != "zero3":
        return {}
    category = Category.WEIGHTS_FROZEN if spec.is_adapter else Category.WEIGHTS_TRAINABLE
    return {category: GATHERED_BLOCKS * block_weight_bytes(shape, spec)}


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


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardedPeak:
    """How sharding changed the step's peak: per GPU against the unsharded replica."""

    sharding: Sharding
    gpus: int
    unsharded_peak_bytes: int  # one full replica's peak (what ``--sharding none`` gives)
    sharded_away_bytes: int  # bytes of the per-GPU peak moment each GPU no longer holds
    gather_bytes: int  # zero3's gathered blocks

    def to_dict(self) -> dict[str, Any]:
        return {"sharding": self.sharding, "gpus": self.gpus, "unsharded_peak_bytes": self.unsharded_peak_bytes,
                "sharded_away_bytes": self.sharded_away_bytes, "gather_bytes": self.gather_bytes}


def shard_moments(moments: tuple[Moment, ...], shape: ModelShape,
                  spec: RunSpec) -> tuple[tuple[Moment, ...], ShardedPeak | None]:
    """Every moment per GPU under ``spec.sharding`` over ``spec.gpus`` GPUs, and what that did to the peak
    (None, and the moments unchanged, without sharding)."""
    if spec.sharding == "none":
        return moments, None
    gather = gathered_weights(shape, spec)
    per_gpu = tuple(shard_moment(m, spec.sharding, spec.gpus, gather) for m in moments)
    top = peak_moment(per_gpu)
    before = moments[per_gpu.index(top)]
    gathered = sum(gather.values())
    return per_gpu, ShardedPeak(sharding=spec.sharding, gpus=spec.gpus,
                                unsharded_peak_bytes=peak_moment(moments).total,
                                sharded_away_bytes=before.total + gathered - top.total, gather_bytes=gathered)
