"""A recorded step as the CUDA caching allocator sees it: the ``malloc`` / ``free`` calls of a training run.

:class:`~memfit.runtime.timeline.TimelineRecorder` (``keep_events=True``) records every storage the tracker counts
and frees, in order, with its own size (``RecordedEvent.size``: the bytes a program asks the allocator for). A
training run on a GPU makes these calls:

1. the model's tensors (``initial``, in the order the tracker registered them: parameters, then buffers),
   the optimizer state excepted;
2. the first step: its storages in recorded order, and, at the first event of the optimizer phase, the
   optimizer state (torch optimizers make it lazily in the first ``step()``: the recorded step was traced with
   the state already made, so it is inserted where the first step makes it);
3. the second step: the same events again (the steady state; each storage of the step gets a fresh key).

That is what :func:`memfit.estimate.allocator.replay` needs for the reserved peak of the first two steps (the
peak ``measure`` reports). Storages of zero bytes take no block (the allocator returns a null pointer for a
zero-byte request) and are skipped. A resize becomes ``("resize", key, new size)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from memfit.estimate.allocator import EventKind
from memfit.estimate.category import Category
from memfit.runtime.events import LiveStorage
from memfit.runtime.timeline import RecordedEvent

__all__ = ["step_allocations"]


def step_allocations(initial: Sequence[LiveStorage], events: Sequence[RecordedEvent], *,
                     steps: int = 2) -> list[tuple[EventKind, Hashable, int]]:
    """The allocator calls of the model's tensors and ``steps`` steps of ``events`` (module docstring)."""
    out: list[tuple[EventKind, Hashable, int]] = []
    state = [s for s in initial if s.category == Category.OPTIMIZER]
    for s in initial:
        if s.category != Category.OPTIMIZER and s.size > 0:
            out.append(("alloc", ("init", s.storage), s.size))
    current: dict[int, Hashable] = {s.storage: ("init", s.storage) for s in initial}
    sizes: dict[int, int] = {s.storage: s.size for s in initial}
    for step in range(steps):
        state_made = step > 0
        for e in events:
            if not state_made and e.phase == "optimizer":
                out.extend(("alloc", ("init", s.storage), s.size) for s in state if s.size > 0)
                state_made = True
            if e.kind == "alloc":
                if e.size <= 0:
                    continue
                key: Hashable = (step, e.storage)
                current[e.storage] = key
                sizes[e.storage] = e.size
                out.append(("alloc", key, e.size))
            elif e.kind == "free":
                freed = current.pop(e.storage, None)
                if freed is not None:
                    out.append(("free", freed, 0))
            else:
                new = sizes.get(e.storage, 0) + e.size
                sizes[e.storage] = new
                held = current.get(e.storage)
                if held is None:
                    current[e.storage] = held = (step, e.storage)
                    out.append(("alloc", held, new))
                else:
                    out.append(("resize", held, new))
        if not state_made:
            out.extend(("alloc", ("init", s.storage), s.size) for s in state if s.size > 0)
    return out
