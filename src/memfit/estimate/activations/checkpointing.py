"""Activation checkpointing: which blocks keep only their input, and what else a checkpoint keeps.

A checkpointed segment keeps only its input (b*s*h in the residual dtype) through the forward; the backward
recomputes one segment at a time, so the recompute holds ``segment`` blocks' activations at once. The
arguments of a checkpointed block are kept with it (``torch.utils.checkpoint``, non-reentrant): under
eager attention (or sdpa with a padding mask) that includes the (b, 1, s, s) attention mask, one per kind
of layer the model has (Gemma 2 alternates sliding-window and full layers: two masks), kept to the end of
the backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec


def checkpoint_segment(spec: RunSpec, n_layers: int) -> int:
    """Blocks per checkpointed segment: 0 without checkpointing, 1 for ``full`` (transformers checkpoints
    every decoder layer) and for the checkpointed blocks of ``every-k`` (one block in k, the others not
    checkpointed: transformers 5.24.0's ``every_n_layers``, blocks 0, k, 2k, ..., so block 0 is always one),
    ceil(sqrt(L)) for ``sqrt`` (Chen et al. 2016, section 4: segments of ceil(sqrt(L)) consecutive blocks,
    each one checkpoint; :mod:`memfit.runtime.segments` runs them).

    >>> checkpoint_segment(RunSpec(checkpointing="sqrt"), 32), checkpoint_segment(RunSpec(checkpointing="full"), 32)
    (6, 1)
    """
    if spec.checkpointing == "none":
        return 0
    if spec.checkpointing == "full":
        return 1
    if spec.checkpointing == "every-k":
        return 1
    k = 1
    while k * k < n_layers:
        k += 1
    return k


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoints:
    """``segment`` blocks per segment (0: none); ``kept_bytes`` the kept segment inputs (none with
    ``--offload``: they live in host memory, but a leaf first input, ``leaf_input``, stays) and attention masks;
    ``plain_blocks`` (every-k) the blocks that are not checkpointed and keep all they save; ``host_bytes`` the
    block inputs ``--offload`` copies to host memory (:mod:`memfit.runtime.offload`)."""

    segment: int
    kept_bytes: int
    plain_blocks: int
    host_bytes: int = 0


def checkpoints(model: ModelShape, spec: RunSpec, *, layer_input: int, mask_itemsize: int,
                sliding_masks: bool = False, leaf_input: bool = False) -> Checkpoints:
    """What checkpointing keeps through the forward; ``layer_input`` is one block's input in bytes.

    ``--offload`` (transformers 5.24.0 ``offload=True``: ``save_on_cpu`` around each checkpoint) copies each
    checkpointed block's input to host memory (``host_bytes``) and the device copy dies, except when block 0's
    input is a leaf (``leaf_input``: the frozen embedding's output made to require grad by
    ``enable_input_require_grads``): the graph's AccumulateGrad node holds it to the end of the backward, so it
    stays on the device too (measured: LoRA on Llama, 4 layers, offload frees 3 block inputs, not 4).

    ``full``: L inputs; ``sqrt``: ceil(L / segment); ``every-k``: ceil(L / k) (blocks 0, k, 2k, ...), the other
    blocks plain.
    Plus ``len(set(layer_types))`` masks of b*s*s elements (``mask_itemsize``: the residual dtype) when
    the kernel takes a mask (one, ``sliding_masks``, when only the sliding layers' sdpa calls take one).
    """
    n = model.n_layers
    seg = checkpoint_segment(spec, n)
    if not seg:
        return Checkpoints(segment=0, kept_bytes=0, plain_blocks=0)
    kept, plain = -(-n // seg), 0
    if spec.checkpointing == "every-k":
        # one block in k is checkpointed, as transformers 5.24.0's ``_set_gradient_checkpointing`` sets it
        # (``layer_index % every_n_layers == 0``): blocks 0, k, 2k, ... keep only their input, the others keep
        # everything they save
        kept = -(-n // spec.checkpoint_every)
        plain = n - kept
    # --offload-activations with checkpointing: TRL's pack sees only what checkpoint saves with the ambient hooks,
    # the block inputs, the same copies as --offload (memfit.runtime.act_offload)
    offload = spec.offload or spec.offload_activations
    kept_bytes = (layer_input if leaf_input else 0) if offload else kept * layer_input
    host = kept * layer_input if offload else 0
    if spec.attention == "eager" or (spec.padding_mask and spec.attention == "sdpa"):
        masks = len(set(model.layer_types)) or 1
        kept_bytes += masks * spec.batch * spec.seq * spec.seq * mask_itemsize
    elif sliding_masks:  # sdpa: the sliding layers' mask (``sdpa_masked_layers``); the full layers take none
        kept_bytes += spec.batch * spec.seq * spec.seq * mask_itemsize
    return Checkpoints(segment=seg, kept_bytes=kept_bytes, plain_blocks=plain, host_bytes=host)
