"""The trace engine: one training step of the real transformers/PEFT model on fake tensors.

Exact accounting of every storage the real code allocates (same builder, step and tracker as
``memfit measure``) with no memory behind it, so a 70B step traces on a laptop. Public names load lazily
so ``import memfit.trace`` does not import torch:

- :func:`memfit.trace.engine.trace_step` traces one steady-state step and returns a TraceResult.
- :class:`memfit.trace.result.TraceResult` is the result, in the estimate's JSON shape plus per-module
  detail.
- :mod:`memfit.trace.cuda` holds the CPU-to-CUDA corrections (attention kernel, for-each optimizer,
  allocator rounding).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "trace_step": "memfit.trace.engine",
    "check_trace_spec": "memfit.trace.engine",
    "TraceResult": "memfit.trace.result",
    "ModuleBytes": "memfit.trace.result",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'memfit.trace' has no attribute {name!r}")
