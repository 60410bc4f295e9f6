"""block_mask_bytes: the bytes of a materialised (batch, 1, L, L) mask, worked by hand."""

from __future__ import annotations

import pytest

from memfit.errors import MemfitError
from memfit.estimate.attention_mask import block_mask_bytes


def test_block_mask_bytes_by_hand() -> None:
    # batch 4, L 4096, fp32: 4 * 4096 * 4096 * 4 = 268,435,456 B = 256 MiB; one bf16 row of 2048: 8 MiB
    assert block_mask_bytes(4, 4096, 4) == 268_435_456 == 256 * 1024**2
    assert block_mask_bytes(1, 2048, 2) == 8 * 1024**2
    assert block_mask_bytes(3, 5) == 3 * 5 * 5 * 4  # fp32 by default
    with pytest.raises(MemfitError, match="dtype_bytes >= 1"):
        block_mask_bytes(1, 8, 0)
