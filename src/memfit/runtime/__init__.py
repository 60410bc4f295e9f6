"""The torch runtime measure and trace share (neither imports the other; both build on this).

- :mod:`memfit.runtime.build`: the transformers (+ PEFT) model a RunSpec describes, on a device, on meta
  or on fake tensors; ``hf_config``, ``lora_config``, ``tiny_config``.
- :mod:`memfit.runtime.step`: one training step in the Trainer's order, and its timing.
- :mod:`memfit.runtime.tracker`: :class:`~memfit.runtime.tracker.LiveTensorTracker`, live storage bytes by
  category, with the extension points engines and observers use (:mod:`memfit.runtime.events`).
- :mod:`memfit.runtime.scopes`: which module made a storage, and what autograd saved per module.
- :mod:`memfit.runtime.timeline`: :class:`~memfit.runtime.timeline.TimelineRecorder`, memory over the step
  (operator, phase, module, bytes by category at each allocation and free), an observer of the tracker.
- :mod:`memfit.runtime.snapshot`: the recorded step as a ``torch.cuda.memory._snapshot()`` pickle.
"""

from __future__ import annotations

from memfit.errors import require_extra

require_extra("torch", "torch")
require_extra("transformers", "torch")

from memfit.runtime.build import (  # noqa: E402
    build_meta_model,
    build_model,
    fake_model,
    hf_config,
    lora_config,
    tiny_config,
)
from memfit.runtime.events import PeakSnapshot, SimulatedOutOfMemoryError, StorageEvent  # noqa: E402
from memfit.runtime.scopes import ModuleScopes, SavedTensorLedger  # noqa: E402
from memfit.runtime.step import StepInputs, StepResult, make_optimizer, run_step  # noqa: E402
from memfit.runtime.timeline import TimelineRecorder  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker, optimizer_state_tensors  # noqa: E402

__all__ = [
    "LiveTensorTracker",
    "ModuleScopes",
    "PeakSnapshot",
    "SavedTensorLedger",
    "SimulatedOutOfMemoryError",
    "StepInputs",
    "StepResult",
    "StorageEvent",
    "TimelineRecorder",
    "build_meta_model",
    "build_model",
    "fake_model",
    "hf_config",
    "lora_config",
    "make_optimizer",
    "optimizer_state_tensors",
    "run_step",
    "tiny_config",
]
