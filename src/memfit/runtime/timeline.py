"""Memory over the step, recorded from the tracker's observer hook: at each allocation and free the operator,
the phase, the module path and the bytes alive by category.

:class:`TimelineRecorder` subscribes to a :class:`~memfit.runtime.tracker.LiveTensorTracker`. The point of
event ``k`` is what is alive just before event ``k + 1`` happens (or the phase changes): autograd attaches a
gradient to ``.grad`` and the optimizer files its state *after* the storage was counted, and the tracker's
own peak snapshot is taken at that same moment (the first free after a run of allocations), so each point
books its storages as that snapshot would. The highest point of the timeline is the tracker's peak, byte for
byte and category for category (a test checks this on real steps, and the ledger the categories are read
from against a full scan at every event).

The phase is the tracker's, with ``forward`` split at the output layer: what the forward allocates after
the output layer returned (the fp32 upcast of the logits, log-softmax, the loss) is phase ``loss``.

:func:`memfit.timeline.downsample` keeps at most :data:`~memfit.timeline.MAX_TIMELINE_POINTS` points for the
JSON: the first and the last, and the highest point of each equal bucket of events between them, so the peak
is always kept.

With ``keep_events=True`` the recorder also keeps every event (for :mod:`memfit.runtime.snapshot`, the
memory-snapshot pickle).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from memfit.estimate.category import Category
from memfit.runtime.events import LiveStorage, StorageEvent
from memfit.runtime.tracker import TRACKED_CATEGORIES, LiveTensorTracker
from memfit.timeline import MAX_TIMELINE_POINTS, TimelinePoint, downsample

__all__ = ["MAX_TIMELINE_POINTS", "RecordedEvent", "TimelinePoint", "TimelineRecorder", "downsample"]

@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedEvent:
    """One storage event as :mod:`memfit.runtime.snapshot` replays it (``t`` as in the timeline)."""

    t: int
    kind: str  # "alloc" | "free" | "resize"
    storage: int
    nbytes: int  # booked bytes (change)
    size: int  # the storage's own bytes (change)
    category: Category | None
    phase: str
    module: str
    op: str | None


class TimelineRecorder:
    """Subscribe to ``tracker`` and record a :class:`TimelinePoint` per storage event (module docstring).

    Usage::

        recorder = TimelineRecorder(tracker, model=model)   # model: splits forward at the output layer
        with tracker: ... run the step ...
        recorder.close()
        recorder.points          # every point
        downsample(recorder.points)
    """

    def __init__(self, tracker: LiveTensorTracker, *, model: torch.nn.Module | None = None,
                 keep_events: bool = False) -> None:
        self.tracker = tracker
        self.points: list[TimelinePoint] = []
        self.events: list[RecordedEvent] = []
        self.keep_events = keep_events
        self.initial = tracker.live_storages() if keep_events else []  # alive before the first event
        self.final: list[LiveStorage] = []  # alive after the last (with keep_events, from close())
        self._pending: tuple[int, str, str, str | None] | None = None
        self._after_head = False
        self._t = 0
        self._hooks: list[Any] = []
        self._unsubscribe: Callable[[], None] | None = tracker.subscribe(on_storage=self._on_storage,
                                                                        on_phase=self._on_phase)
        head = _output_layer(model) if model is not None else None
        if head is not None:
            self._hooks.append(head.register_forward_hook(functools.partial(_head_done, weakref.ref(self))))

    def close(self) -> None:
        """Record the last point and stop listening."""
        self._settle(self.tracker.live_by_category())
        if self.keep_events and self._unsubscribe is not None:
            self.final = self.tracker.live_storages()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self) -> TimelineRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- observers -------------------------------------------------------------------------------
    def _phase(self, phase: str) -> str:
        return "loss" if phase == "forward" and self._after_head else phase

    def _on_storage(self, event: StorageEvent) -> None:
        now = self.tracker.live_by_category()
        if self._pending is not None:  # the previous event's point: what is alive just before this one
            before = dict(now)
            cat = event.category if event.kind == "free" else self.tracker.category_of(event.storage)
            if cat is not None:
                before[cat] -= event.nbytes
            self._settle(before)
        phase = self._phase(event.phase)
        module = event.tag or f"({event.phase})"
        self._pending = (self._t, phase, module, event.op)
        if self.keep_events:
            self.events.append(RecordedEvent(t=self._t, kind=event.kind, storage=event.storage, nbytes=event.nbytes,
                                             size=event.size, category=event.category, phase=phase, module=module,
                                             op=event.op))
        self._t += 1

    def _on_phase(self, name: str) -> None:
        self._settle(self.tracker.live_by_category())
        self._after_head = False

    def _settle(self, by_category: dict[Category, int]) -> None:
        if self._pending is None:
            return
        t, phase, module, op = self._pending
        self._pending = None
        self.points.append(TimelinePoint(t=t, phase=phase, module=module, op=op,
                                         by_category={c: by_category.get(c, 0) for c in TRACKED_CATEGORIES}))


def _head_done(ref: weakref.ref[TimelineRecorder], module: torch.nn.Module, args: Any, output: Any) -> None:
    recorder = ref()
    if recorder is not None and recorder.tracker.current_phase == "forward":
        recorder._after_head = True


def _output_layer(model: torch.nn.Module) -> torch.nn.Module | None:
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    return head if isinstance(head, torch.nn.Module) else None
