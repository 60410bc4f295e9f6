"""The memory categories every engine reports in, defined once (estimate, trace, measure, JSON, tables).

=====================  ==================================================================================
category               bytes of
=====================  ==================================================================================
``weights_frozen``     parameters without ``requires_grad`` (and buffers)
``weights_trainable``  parameters with ``requires_grad`` (LoRA adapters, or every weight of a full run)
``gradients``          the ``.grad`` of trainable parameters
``optimizer``          optimizer state (AdamW's two moments, ``step``; 8-bit states; Adafactor factors)
``activations``        what the forward keeps for the backward (and checkpoints, the residual stream)
``logits``             vocabulary-wide tensors: logits, their fp32 copy, log-softmax and their gradients
``temporaries``        short-lived tensors of the backward and of the optimizer step
``inputs``             the batch itself: ``input_ids`` and ``labels`` (int64)
``untracked``          what a device counter saw beyond the tracked tensors (CUDA workspaces; measure only)
=====================  ==================================================================================

The order of the members is the order tables and JSON use. ``Category`` is a ``StrEnum``: its members
compare equal to their names (``Category.LOGITS == "logits"``), so dictionaries keyed by them serialise
to JSON unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    WEIGHTS_FROZEN = "weights_frozen"
    WEIGHTS_TRAINABLE = "weights_trainable"
    GRADIENTS = "gradients"
    OPTIMIZER = "optimizer"
    ACTIVATIONS = "activations"
    LOGITS = "logits"
    TEMPORARIES = "temporaries"
    INPUTS = "inputs"
    UNTRACKED = "untracked"


MODEL_STATES: tuple[Category, ...] = (
    Category.WEIGHTS_FROZEN,
    Category.WEIGHTS_TRAINABLE,
    Category.GRADIENTS,
    Category.OPTIMIZER,
)
"""The categories that scale with parameter count (the rest scale with batch x sequence)."""
