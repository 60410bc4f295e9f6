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

Activations, logits and backward temporaries are per micro-batch and are never sharded; the optimizer step's
temporaries are (each GPU updates only its partition). Under ZeRO-3 each block's
weights are gathered in full just before they are used (and again in the backward), and FSDP prefetches
the next block while computing the current one, so two blocks' full weights are alive on top of the shards:

    per_gpu = sum_c bytes_c * (1/N if c is sharded else 1) + gather
    gather  = 2 * (weight bytes of one decoder block)     [zero3 only]

Worked: a full fine-tune of Llama-3.1-8B (8.03e9 params) in bf16 with torch's AdamW (moments in bf16):
2 B weights + 2 B gradients + 4 B moments = 8 B/param = 64 GB of states. On N = 8 GPUs under zero3 each
GPU holds 64 / 8 = 8 GB of them, plus 2 blocks x 218M params x 2 B = 0.87 GB gathered, plus activations.

Sharding can move the peak to another moment of the step (sharding the optimizer shrinks the optimizer
step, not the forward), so the per-GPU peak is the maximum over every moment the estimate lists (see
:func:`moment_parts`). Communication buckets (DeepSpeed's ``reduce_bucket_size``, FSDP's flat-parameter
padding) are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, count_params

Sharding = Literal["none", "zero1", "zero2", "zero3"]
SHARDINGS: tuple[str, ...] = get_args(Sharding)

# "optimizer_temporaries": the optimizer step's scratch tensors, which ZeRO allocates for its shard only
SHARDED_COMPONENTS: dict[str, tuple[str, ...]] = {
    "none": (),
    "zero1": ("optimizer", "optimizer_temporaries"),
    "zero2": ("optimizer", "optimizer_temporaries", "gradients"),
    "zero3": ("optimizer", "optimizer_temporaries", "gradients", "weights_trainable", "weights_frozen"),
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
    (180, 90)
    """
    if sharding not in SHARDED_COMPONENTS:
        raise MemfitError(f"--sharding must be one of {', '.join(SHARDINGS)}; got {sharding!r}")
    sharded = SHARDED_COMPONENTS[sharding]
    total = sum(int(v) for v in components.values())
    away = sum(int(components.get(c, 0)) - _ceil_div(int(components.get(c, 0)), gpus) for c in sharded)
    return total - away, away


def shard_peak(estimate: Any, shape: ModelShape, spec: RunSpec, sharding: str, gpus: int) -> ShardedPeak:
    """The per-GPU peak of ``estimate`` (a MemoryEstimate) under ``sharding`` over ``gpus`` GPUs: the
    maximum over the step's moments of the sharded live bytes, plus zero3's gathered blocks."""
    if gpus < 1:
        raise MemfitError(f"--gpus must be a positive integer, got {gpus}")
    peak = int(estimate.peak_bytes)
    if sharding == "none" or gpus == 1:
        return ShardedPeak(sharding=sharding, gpus=gpus, peak_bytes=peak, unsharded_peak_bytes=peak,
                           sharded_away_bytes=0, gather_bytes=0)
    best, best_away = -1, 0
    for total, known in moment_parts(estimate):
        _, away = shard_components(known, sharding, gpus)
        if total - away > best:
            best, best_away = total - away, away
    gather = GATHERED_BLOCKS * block_weight_bytes(shape, spec) if sharding == "zero3" else 0
    return ShardedPeak(sharding=sharding, gpus=gpus, peak_bytes=best + gather, unsharded_peak_bytes=peak,
                       sharded_away_bytes=best_away, gather_bytes=gather)


def moment_parts(estimate: Any) -> list[tuple[int, Mapping[str, int]]]:
    """(live bytes, the model-state bytes known to be alive) for every moment of the step.

    The peak moment's components are exact. For the other moments the estimate gives totals
    (``moments``); weights and optimizer states are alive in every moment at their full size
    (``model_states``). Gradients, by the moment's name: none at the loss; lm_head's at ``backward:
    lm_head``; lm_head's and the final norm's at ``backward: last block`` (its own block's are left out);
    every block's too at ``backward: first block`` (ZeRO-2 reduce-scatters each bucket as it fills, so
    those are sharded as well); all of them at the end of the backward and in the optimizer step. A moment
    with another name counts no gradient as shardable, which can only over-state the per-GPU bytes. The
    optimizer step's temporaries are per shard under ZeRO (each GPU updates only its partition).
    """
    peak_moment = str(getattr(estimate, "peak_moment", ""))
    at_peak = dict(estimate.components)
    if peak_moment.startswith("optimizer"):
        at_peak["optimizer_temporaries"] = at_peak.pop("temporaries", 0)
    out: list[tuple[int, Mapping[str, int]]] = [(int(estimate.peak_bytes), at_peak)]
    moments = getattr(estimate, "moments", None)
    states = getattr(estimate, "model_states", None)
    if not isinstance(moments, Mapping) or states is None:
        return out
    for name, total in moments.items():
        if name == peak_moment or not isinstance(total, int):
            continue
        known = {"weights_frozen": int(states.weights_frozen), "weights_trainable": int(states.weights_trainable),
                 "optimizer": int(states.optimizer), "gradients": _gradients_alive(name, states)}
        if name.startswith("optimizer"):  # the rest of the optimizer step is its scratch (and the inputs)
            known["optimizer_temporaries"] = max(0, total - sum(known.values()))
        out.append((total, known))
    return out


def _gradients_alive(moment: str, states: Any) -> int:
    """Gradient bytes surely alive at ``moment`` (see :func:`moment_parts`); 0 when unknown."""
    head = int(getattr(states, "grads_head", 0))
    other = int(getattr(states, "grads_other", 0))
    if moment.startswith("optimizer") or moment.endswith("embeddings"):
        return int(states.gradients)
    if moment == "backward: first block":
        return min(int(states.gradients), head + other + int(getattr(states, "grads_per_layer", 0)) * _layers(states))
    if moment == "backward: last block":
        return head + other
    if moment == "backward: lm_head":
        return head
    return 0


def _layers(states: Any) -> int:
    """Blocks with gradients: (all gradients - head - embeddings - other) / one block's, when known."""
    per = int(getattr(states, "grads_per_layer", 0))
    if per <= 0:
        return 0
    rest = int(states.gradients) - int(getattr(states, "grads_head", 0)) - int(getattr(states, "grads_embed", 0)) \
        - int(getattr(states, "grads_other", 0))
    return max(0, rest // per)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
