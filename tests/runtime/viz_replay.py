"""The replay https://pytorch.org/memory_viz runs on a snapshot, written from its code (MemoryViz.js), so tests
check memfit's snapshots against the viewer, not against memfit's writer."""

from __future__ import annotations

from typing import Any


def replay(snapshot: dict[str, Any], *, segments: bool = False) -> int:
    """The highest total the viewer's "Active Memory Timeline" draws (MemoryViz.js ``process_alloc_data``):
    blocks alive in ``segments`` that no ``alloc`` entry made are there from the start; each ``alloc`` adds its
    size, each ``free_completed`` of an allocated address takes it away. ``segments=True``: the "Active Cached
    Segment Timeline", the same with ``segment_alloc`` / ``segment_free``. Written from the viewer's code,
    not from memfit's writer."""
    alloc, free = ("segment_alloc", "segment_free") if segments else ("alloc", "free_completed")
    trace = snapshot["device_traces"][0]
    open_sizes: dict[int, int] = {}
    total = peak = 0
    for e in trace:
        if e["action"] == alloc:
            open_sizes[e["addr"]] = e["size"]
            total += e["size"]
        elif e["action"] == free and e["addr"] in open_sizes:
            total -= open_sizes.pop(e["addr"])
        peak = max(peak, total)
    allocated_in_trace = set(open_sizes)
    initially = sum(s["total_size"] if segments else b["requested_size"] for s in snapshot["segments"]
                    for b in s["blocks"][:1 if segments else None]
                    if b["state"] == "active_allocated" and s["address"] not in allocated_in_trace)
    return peak + initially
