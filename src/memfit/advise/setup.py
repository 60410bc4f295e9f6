"""One candidate configuration of the advisor: a RunSpec, and whether the data is packed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memfit.estimate import RunSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """A run the advisor may propose: ``spec`` (sharding and world size included) and ``packing``, the one
    knob that is not a RunSpec field (it changes the rows, not the memory model)."""

    spec: RunSpec
    packing: bool = False

    def with_(self, *, packing: bool | None = None, **changes: Any) -> Setup:
        """A copy with ``packing`` and any RunSpec fields changed (the spec validated again)."""
        return Setup(spec=self.spec.with_(**changes) if changes else self.spec,
                     packing=self.packing if packing is None else packing)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "packing": self.packing}
