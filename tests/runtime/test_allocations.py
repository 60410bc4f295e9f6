"""The recorded step as allocator calls (memfit.runtime.allocations), on a sequence written by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from memfit.estimate.allocator import replay  # noqa: E402
from memfit.estimate.category import Category  # noqa: E402
from memfit.runtime.allocations import step_allocations  # noqa: E402
from memfit.runtime.events import LiveStorage  # noqa: E402
from memfit.runtime.timeline import RecordedEvent  # noqa: E402

MiB = 1024**2


def _e(kind: str, storage: int, size: int, phase: str) -> RecordedEvent:
    return RecordedEvent(t=0, kind=kind, storage=storage, nbytes=size, size=size, category=None, phase=phase,
                         module="m", op=None)


def test_two_steps_with_the_optimizer_state_made_in_the_first() -> None:
    """A weight (8 MiB) and its optimizer state (8 MiB) alive before the traced step; the step allocates a 12 MiB
    activation (freed in backward), a 0-byte storage (skipped), a gradient (8 MiB, optimizer phase, freed).

    Calls: weight; step 1: act, free act, grad, then the state at the first optimizer event, free grad; step 2 the
    same without the state. Replay (worked from the allocator's rules): weight 8 MiB -> 20 MiB segment A (12 MiB
    left); act 12 MiB takes A's 12 MiB remainder; freed, A's tail is 12 MiB again; grad 8 MiB takes it (4 MiB left,
    > 1 MiB: split); state 8 MiB: only 4 MiB free -> segment B (20 MiB); free grad (A's tail back to 12 MiB).
    Step 2: act 12 MiB: best fit is A's 12 MiB (B has 12 MiB too; equal size, lower address first): no new segment;
    grad 8 MiB from B's 12 MiB. Reserved peak 40 MiB; allocated peak 8 + 8 + 12 = 28 MiB (weight, state and act in
    step 2's forward: the first step's forward had no state)."""
    initial = [LiveStorage(storage=1, nbytes=8 * MiB, size=8 * MiB, category=Category.WEIGHTS_TRAINABLE, tag=None),
               LiveStorage(storage=2, nbytes=8 * MiB, size=8 * MiB, category=Category.OPTIMIZER, tag=None)]
    events = [_e("alloc", 10, 12 * MiB, "forward"), _e("alloc", 11, 0, "forward"),
              _e("free", 10, -12 * MiB, "backward"), _e("alloc", 12, 8 * MiB, "backward"),
              _e("free", 12, -8 * MiB, "optimizer")]
    calls = step_allocations(initial, events)
    kinds = [(k, n) for k, _, n in calls]
    assert kinds == [("alloc", 8 * MiB), ("alloc", 12 * MiB), ("free", 0), ("alloc", 8 * MiB), ("alloc", 8 * MiB),
                     ("free", 0), ("alloc", 12 * MiB), ("free", 0), ("alloc", 8 * MiB), ("free", 0)]
    r = replay(calls)
    assert r.reserved_peak_bytes == 40 * MiB
    assert r.allocated_peak_bytes == 28 * MiB
    assert r.segments == 2
