"""The replay https://pytorch.org/memory_viz runs on a snapshot, written from its code (MemoryViz.js), so tests
check memfit's snapshots against the viewer, not against memfit's writer."""

from __future__ import annotations

from typing import Any


def replay(snapshot: dict[str, Any], *, segments: bool = False) -> int:
    """The highest total the viewer's "Active Memory Timeline" draws (MemoryViz.js ``process_alloc_data``):
    blocks alive in ``segments`` that no ``alloc`` entry made, and blocks freed that no ``alloc`` entry made,
    are there from the start; each ``alloc`` adds its size, each ``free_completed`` takes away what it frees.
    ``segments=True``: the "Active Cached Segment Timeline", the same with ``segment_alloc`` /
    ``segment_free``. Written from the viewer's code, not from memfit's writer."""
    alloc, free = ("segment_alloc", "segment_free") if segments else ("alloc", "free_completed")
    trace = snapshot["device_traces"][0]
    open_sizes: dict[int, int] = {}
    before: list[int] = []  # freed, never allocated in the trace: alive from the start
    steps: list[int] = []
    for e in trace:
        if e["action"] == alloc:
            open_sizes[e["addr"]] = e["size"]
            steps.append(e["size"])
        elif e["action"] == free:
            if e["addr"] in open_sizes:
                steps.append(-open_sizes.pop(e["addr"]))
            else:
                before.append(e["size"])
                steps.append(-e["size"])
    initially = sum(before) + sum(
        s["total_size"] if segments else b["requested_size"] for s in snapshot["segments"]
        for b in s["blocks"][:1 if segments else None]
        if b["state"] == "active_allocated" and (s["address"] if segments else b["address"]) not in open_sizes)
    total = peak = initially
    for step in steps:
        total += step
        peak = max(peak, total)
    return peak
