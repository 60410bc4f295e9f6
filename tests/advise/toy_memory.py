"""A toy memory model for the advisor's tests: round figures an expected plan can be worked from by hand.

One moment, ``backward: loss``, on CPU (reserved = the peak, so "fits" is peak + headroom <= GPU), in GiB:

==================  =========================================================================================
weights             full 16 (trainable) + its gradients 16 + AdamW 32; lora 10 (frozen); qlora 4 (frozen)
adapter             rank x 16 MiB (lora, qlora): rank 64 = 1 GiB, rank 8 = 128 MiB
activations         b x s/1024 x (4 without checkpointing, 1 with any) x (2 for eager attention)
logits              b x s/1024 with the standard loss, 0 chunked
==================  =========================================================================================

The advisor runs on it exactly as on the real estimate: the moment goes through
:func:`memfit.estimate.budget.budget_of` (sharding, peak), with llama-3.2-1b's real model states and
activations standing in for the parts the advisor reads besides the moments.
"""

from __future__ import annotations

from dataclasses import replace

from memfit.estimate import Category, MemoryEstimate, ModelShape, RunSpec, estimate_activations, model_states
from memfit.estimate.budget import budget_of
from memfit.estimate.moments import Moment
from memfit.estimate.states import ModelStates

GIB = 1024**3
MIB = 1024**2


def toy_parts(spec: RunSpec) -> dict[Category, int]:
    full = spec.method == "full"
    w = {"full": 16, "lora": 10, "qlora": 4}[spec.method] * GIB
    k = spec.batch * spec.seq // 1024
    acts = k * (4 if spec.checkpointing == "none" else 1) * (2 if spec.attention == "eager" else 1) * GIB
    return {Category.WEIGHTS_FROZEN: 0 if full else w,
            Category.WEIGHTS_TRAINABLE: w if full else spec.rank * 16 * MIB,
            Category.GRADIENTS: w if full else 0, Category.OPTIMIZER: 2 * w if full else 0,
            Category.ACTIVATIONS: acts, Category.LOGITS: k * GIB if spec.loss == "standard" else 0}


def toy_states(shape: ModelShape, spec: RunSpec) -> ModelStates:
    """llama-3.2-1b's model states with the toy's sizes: sharding divides what the toy holds. No per-layer
    gradients (the toy's one moment is the head's backward: every gradient counted whole), and 1 B of optimizer
    state per trainable parameter (ZeRO-1's largest tensor, the 128,256 x 2,048 embedding, then weighs
    262,668,288 B, under any rank's 1/8 share)."""
    p = toy_parts(spec)
    return replace(model_states(shape, spec), weights_trainable=p[Category.WEIGHTS_TRAINABLE],
                   weights_frozen=p[Category.WEIGHTS_FROZEN], gradients=p[Category.GRADIENTS],
                   optimizer=p[Category.OPTIMIZER], trainable_params=max(1, p[Category.OPTIMIZER]),
                   grads_per_layer=0, grads_head=0, grads_embed=0, grads_other=0, largest_tensor=0)


def toy_estimate(shape: ModelShape, spec: RunSpec) -> MemoryEstimate:
    moment = Moment(phase="backward", label="backward: loss", parts=toy_parts(spec))
    return budget_of(shape, spec, toy_states(shape, spec), estimate_activations(shape, spec), (moment,))


def toy_peak(spec: RunSpec) -> int:
    return sum(toy_parts(spec).values())
