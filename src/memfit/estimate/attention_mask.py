"""Memory of a materialised 4D attention mask. Pure Python.

A packed batch whose examples are kept apart by an additive block-diagonal mask (the collator's
``attention="block_mask"`` form, :mod:`memfit.data.torch.collator`) holds one float of shape
``(batch, 1, seq_len, seq_len)`` for the whole forward and backward::

    bytes = batch * 1 * seq_len * seq_len * dtype_bytes

The position-ids form with flash attention needs none; sdpa and eager build a boolean or float mask of this
shape internally anyway (transformers 5.24's ``masking_utils.create_causal_mask``), so it is one such tensor
per step either way.
"""

from __future__ import annotations

from memfit.errors import MemfitError
from memfit.estimate.constants import FP32_BYTES

__all__ = ["block_mask_bytes"]


def block_mask_bytes(batch: int, seq_len: int, dtype_bytes: int = FP32_BYTES) -> int:
    """Bytes of an additive block-diagonal mask of shape ``(batch, 1, seq_len, seq_len)``.

    Worked example: batch 4, seq_len 4096, fp32 (4 bytes): 4 * 4096 * 4096 * 4 = 268,435,456 bytes = 256 MiB
    (MiB = 1024^2 bytes).

    >>> block_mask_bytes(4, 4096, 4)
    268435456
    """
    if batch < 0 or seq_len < 0 or dtype_bytes < 1:
        raise MemfitError("block mask size needs batch >= 0, seq_len >= 0 and dtype_bytes >= 1")
    return batch * 1 * seq_len * seq_len * dtype_bytes
