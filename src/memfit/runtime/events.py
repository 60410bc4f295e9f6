"""What :class:`memfit.runtime.tracker.LiveTensorTracker` reports: the peak snapshot, one event per change of
the live bytes (for observers such as a timeline recorder), and the simulated out-of-memory error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from memfit.estimate.category import Category


class SimulatedOutOfMemoryError(RuntimeError):
    """Live bytes went over the tracker's ``memory_limit`` (a simulated device size)."""

    def __init__(self, *, live_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"simulated out of memory: {live_bytes:,} B live > limit {limit_bytes:,} B")
        self.live_bytes = live_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class PeakSnapshot:
    """Bytes alive at a peak (or at the moment of :meth:`LiveTensorTracker.snapshot`), by category, with
    the phase it happened in."""

    peak_bytes: int
    phase: str
    by_category: dict[Category, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "phase": self.phase, "by_category": dict(self.by_category)}


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageEvent:
    """One change of the live bytes: a storage counted (``alloc``), freed, or resized in place.

    ``nbytes`` is the change in booked bytes (negative for a free), ``live_bytes`` the total after it; ``op``
    the operator running when it happened (``"aten.mm.default"``; None outside any operator: a tensor
    registered by the caller, most frees); ``phase`` and ``tag`` as the tracker had them. ``storage``
    identifies the storage while it lives. ``size`` is the change in the storage's own bytes (``nbytes`` less any
    ``booked_size`` rounding: what a program asks the allocator for) and ``category`` the category the tracker books
    the storage under after the change (for a free, the one it had). A free is reported from the storage's
    finalizer: an observer must not touch tensors there (:meth:`LiveTensorTracker.snapshot`, the bytes alive by
    category, is safe: the tracker takes its own snapshots there).
    """

    kind: Literal["alloc", "free", "resize"]
    storage: int
    nbytes: int
    live_bytes: int
    phase: str
    tag: str | None
    op: str | None
    size: int = 0
    category: Category | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveStorage:
    """A storage alive now: its booked bytes, its own bytes, its category and the tag it was counted with."""

    storage: int
    nbytes: int
    size: int
    category: Category
    tag: str | None


StorageObserver = Callable[[StorageEvent], None]
PhaseObserver = Callable[[str], None]
