"""Facts shared across memfit's layers, each with its unit and where it comes from. Pure Python.

>>> RULE_OF_THUMB_BYTES * 24 * 4 * 2048 * 2048   # the lesson's worked example: L=24, b=4, s=2048, h=2048
8053063680
"""

from __future__ import annotations

FP32_BYTES = 4  # torch.float32 element size
BF16_BYTES = 2  # torch.bfloat16 / torch.float16 element size
INT64_BYTES = 8  # torch.int64 (token ids, labels, index tensors)
# TRL 1.16 get_act_offloading_ctx_manager(min_offload_size=1024): smaller saved tensors stay on the device
TRL_MIN_OFFLOAD_BYTES = 1024
BOOL_BYTES = 1  # torch.bool (dropout masks)

IGNORE_INDEX = -100  # the label torch.nn.functional.cross_entropy and transformers' losses skip

SEQ_MULTIPLE = 64  # memfit proposes sequence lengths in multiples of 64 tokens (lengths, fit)


def seq_round_up(tokens: int) -> int:
    """``tokens`` rounded up to a multiple of :data:`SEQ_MULTIPLE`, at least one multiple.

    >>> seq_round_up(4000), seq_round_up(4032), seq_round_up(0)
    (4032, 4032, 64)
    """
    return SEQ_MULTIPLE * max(1, -(-tokens // SEQ_MULTIPLE))


RULE_OF_THUMB_BYTES = 20
"""LESSON.txt: activations ~ n_layers * batch * seq_len * hidden * ~20 bytes for a bf16 block."""

CUDA_BLOCK_BYTES = 512  # c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: every CUDA block is a multiple
