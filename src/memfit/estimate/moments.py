"""One moment of a training step: its phase, a label, and the bytes alive then by :class:`Category`.

The estimate (:mod:`memfit.estimate.budget`) lists the moments of a step that can hold its peak; each
sums its parts, and the peak is the largest total. Typed parts let another rule act on them without
reading labels: ZeRO sharding (:mod:`memfit.estimate.sharding`) divides the model-state categories of
every moment, and the optimizer step's temporaries, by the number of GPUs.

>>> m = Moment(phase="optimizer", label="optimizer: step",
...            parts={Category.WEIGHTS_TRAINABLE: 40, Category.GRADIENTS: 40, Category.OPTIMIZER: 80})
>>> m.total, m.to_dict()["parts"]["optimizer"]
(160, 80)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from memfit.estimate.category import Category

Phase = Literal["forward", "backward", "optimizer", "evaluation"]
PHASES: tuple[Phase, ...] = get_args(Phase)

STEP_CATEGORIES: tuple[Category, ...] = tuple(c for c in Category if c is not Category.UNTRACKED)
"""The categories the estimate books (``untracked`` is what a device counter sees beyond tracked tensors)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Moment:
    """What is alive at one moment of the step: ``parts`` maps each category to its bytes (absent = 0)."""

    phase: Phase
    label: str  # "backward: loss"; unique within a step
    parts: Mapping[Category, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def part(self, category: Category) -> int:
        return self.parts.get(category, 0)

    def components(self) -> dict[Category, int]:
        """Every booked category in :class:`Category` order, zeros included (the JSON's ``components``)."""
        return {c: self.parts.get(c, 0) for c in STEP_CATEGORIES}

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "label": self.label,
                "parts": {str(c): v for c, v in self.components().items() if v}, "total": self.total}


def peak_moment(moments: tuple[Moment, ...]) -> Moment:
    """The moment with the most bytes alive (the first of equals, in step order)."""
    return max(moments, key=lambda m: m.total)
