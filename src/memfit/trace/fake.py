"""What a fake tensor cannot answer by itself, answered as the real step would.

The model itself is built on fake tensors by :func:`memfit.runtime.build.fake_model` (meta first, then
fakes). Two things the trace still has to do around the step:

- torch optimizers allocate their state lazily in the first ``step()``: :func:`warm_optimizer` runs that
  step on zero gradients, under the fake mode (free), so the traced step holds the state from its start;
- transformers reads tensor values to pick a faster path where a fake tensor has none: :func:`known_inputs`
  answers the packed-sequence check as the step's real inputs would.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def warm_optimizer(model: torch.nn.Module, optimizer: Any, mode: FakeTensorMode) -> None:
    """Let ``optimizer`` allocate its lazily created state, as its first real step does (fake: free)."""
    params = [p for p in model.parameters() if p.requires_grad]
    qmaps = getattr(optimizer, "name2qmap", None)  # bitsandbytes' 8-bit code tables, made real with the optimizer
    if isinstance(qmaps, dict):
        for key, value in list(qmaps.items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
                qmaps[key] = mode.from_tensor(value)
    with mode, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@contextlib.contextmanager
def known_inputs() -> Iterator[None]:
    """transformers' packed-sequence check answers "not packed", as it does for the step's real inputs."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices

    def not_packed(position_ids: torch.Tensor) -> None:
        original(position_ids)  # the same operators (and temporaries) as the real check
        return None

    masking_utils.find_packed_sequence_indices = not_packed
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original
