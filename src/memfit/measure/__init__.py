"""Measured memory and time of real training steps (torch): model builder, live-tensor tracker, steps, sweeps.

Public names are loaded lazily so ``import memfit.measure`` does not import torch:

- :func:`memfit.runtime.build.build_model` builds the transformers/PEFT model a RunSpec describes.
- :class:`memfit.runtime.tracker.LiveTensorTracker` counts live tensor bytes by category.
- :func:`memfit.runtime.step.run_step` runs one Trainer-like training step.
- :func:`memfit.measure.point.measure_point` measures one (batch, seq, checkpointing) point in-process.
- :func:`memfit.measure.sweep.run_sweep` runs a sweep, each point in a fresh subprocess.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "build_model": "memfit.runtime.build",
    "tiny_config": "memfit.runtime.build",
    "LiveTensorTracker": "memfit.runtime.tracker",
    "SimulatedOutOfMemoryError": "memfit.runtime.tracker",
    "StepResult": "memfit.runtime.step",
    "run_step": "memfit.runtime.step",
    "make_optimizer": "memfit.runtime.step",
    "PointResult": "memfit.measure.result",
    "measure_point": "memfit.measure.point",
    "SweepResult": "memfit.measure.sweep",
    "run_sweep": "memfit.measure.sweep",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'memfit.measure' has no attribute {name!r}")
