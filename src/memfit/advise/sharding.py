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

Activations, logits and temporaries are per micro-batch and are never sharded. Under ZeRO-3 each block's
weights are gathered in full just before they are used (and again in the backward), and FSDP prefetches
the next block while computing the current one, so two blocks' full weights are alive on top of the shards:

    per_gpu = sum_c bytes_c * (1/N if c is sharded else 1) + gather
    gather  = 2 * (weight bytes of one decoder block)     [zero3 only]

Worked: a full fine-tune of Llama-3.1-8B (8.03e9 params) in bf16 with torch's AdamW (moments in bf16):
2 B weights + 2 B gradients + 4 B moments = 8 B/param = 64 GB of states. On N = 8 GPUs under zero3 each
GPU holds 64 / 8 = 8 GB of them, plus 2 blocks x 218M params x 2 B = 0.87 GB gathered, plus activations.

The estimate's ``components`` are the bytes alive at the peak; gradients and optimizer states are sharded
in every phase, so the sharded peak is computed from each phase the estimate describes (the maximum over
phases), or from the peak's components when the estimate gives only those. Communication buckets
(DeepSpeed's ``reduce_bucket_size``, FSDP's flat-parameter padding) are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, count_params

Sharding = Literal["none", "zero1", "zero2", "zero3"]
SHARDINGS: tuple[str, ...] = get_args(Sharding)

SHARDED_COMPONENTS: dict[str, tuple[str, ...]] = {
    "none": (),
    "zero1": ("optimizer",),
    "zero2": ("optimizer", "gradients"),
    "zero3": ("optimizer", "gradients", "weights_trainable", "weights_frozen"),
}
GATHERED_BLOCKS = 2  # the block being computed + the one prefetched (FSDP forward/backward prefetch)


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardedPeak:
    """The per-GPU peak of one spec under one sharding stage over ``gpus`` GPUs."""

    sharding: str
    gpus: int
    peak_bytes: int  # per GPU
    unsharded_peak_bytes: int
    sharded_away_bytes: int  # bytes each GPU no longer holds at the peak
    gather_bytes: int  # zero3's gathered blocks

    def to_dict(self) -> dict[str, Any]:
        return {
            "sharding": self.sharding,
            "gpus": self.gpus,
            "peak_bytes": self.peak_bytes,
            "unsharded_peak_bytes": self.unsharded_peak_bytes,
            "sharded_away_bytes": self.sharded_away_bytes,
            "gather_bytes": self.gather_bytes,
        }


def block_weight_bytes(shape: ModelShape, spec: RunSpec) -> int:
    """Bytes of one decoder block's weights as stored (4-bit base: 0.5 B per element, else the precision)."""
    per_layer = count_params(shape).per_layer
    if spec.method == "qlora":
        return per_layer // 2
    return per_layer * spec.weight_bytes


def shard_components(components: Mapping[str, int], sharding: str, gpus: int) -> tuple[int, int]:
    """(bytes per GPU, bytes sharded away) for one set of live components.

    >>> shard_components({"weights_frozen": 100, "gradients": 40, "optimizer": 80, "activations": 50}, "zero2", 4)
    (240, 90)
    """
    if sharding not in SHARDED_COMPONENTS:
        raise MemfitError(f"--sharding must be one of {', '.join(SHARDINGS)}; got {sharding!r}")
    sharded = SHARDED_COMPONENTS[sharding]
    total = sum(int(v) for v in components.values())
    away = sum(int(components.get(c, 0)) - _ceil_div(int(components.get(c, 0)), gpus) for c in sharded)
    return total - away, away


def shard_peak(estimate: Any, shape: ModelShape, spec: RunSpec, sharding: str, gpus: int) -> ShardedPeak:
    """The per-GPU peak of ``estimate`` (a MemoryEstimate) under ``sharding`` over ``gpus`` GPUs."""
    if gpus < 1:
        raise MemfitError(f"--gpus must be a positive integer, got {gpus}")
    peak = int(estimate.peak_bytes)
    if sharding == "none" or gpus == 1:
        return ShardedPeak(sharding=sharding, gpus=gpus, peak_bytes=peak, unsharded_peak_bytes=peak,
                           sharded_away_bytes=0, gather_bytes=0)
    phases = _phase_components(estimate)
    best, best_away = -1, 0
    for comps in phases:
        per_gpu, away = shard_components(comps, sharding, gpus)
        if per_gpu > best:
            best, best_away = per_gpu, away
    gather = GATHERED_BLOCKS * block_weight_bytes(shape, spec) if sharding == "zero3" else 0
    return ShardedPeak(sharding=sharding, gpus=gpus, peak_bytes=best + gather, unsharded_peak_bytes=peak,
                       sharded_away_bytes=best_away, gather_bytes=gather)


def _phase_components(estimate: Any) -> list[Mapping[str, int]]:
    """The live components of every phase the estimate describes, else just those at its peak."""
    phases = getattr(estimate, "phases", None)
    out: list[Mapping[str, int]] = []
    if isinstance(phases, Mapping):
        for value in phases.values():
            comps = getattr(value, "components", value)
            if isinstance(comps, Mapping) and comps:
                out.append(comps)
    if not out:
        out.append(estimate.components)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
