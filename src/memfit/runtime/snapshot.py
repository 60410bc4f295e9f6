"""memfit's step as a CUDA memory snapshot: the dictionary ``torch.cuda.memory._snapshot()`` returns (torch
2.13.0, its docstring's ``Snapshot`` / ``Segment`` / ``Block`` / ``TraceEntry``), pickled so that
https://pytorch.org/memory_viz and ``python -m torch.cuda._memory_viz`` open it beside a real one.

Built from a :class:`~memfit.runtime.timeline.TimelineRecorder` run with ``keep_events=True``:

- ``device_traces[0]``: the storages alive before the step first (``alloc``: the weights, a warm optimizer's
  state), then, per storage event of the step, ``segment_alloc`` + ``alloc`` for an allocation and
  ``free_requested`` + ``free_completed`` + ``segment_free`` for a free, as the caching allocator writes
  them; a resize in place is a free and an allocation. ``size`` of an ``alloc`` / ``free_*`` entry is the
  storage's own bytes (the allocator records the requested size there), of a ``segment_*`` entry the bytes
  memfit books (on a CUDA prediction rounded up to 512 B, as the allocator's blocks are). ``frames``
  (innermost first, as torch writes them) name the operator and the module path that made the storage,
  then each enclosing module, then the phase: ``model.layers.3.mlp.down_proj:0:aten.mm.default``,
  ``model.layers.3.mlp:0:forward``, ..., ``memfit:0:backward``. ``category`` (what the viewer colours by,
  as in the snapshots torch's own ``profile_plot`` makes) is memfit's category of the storage, the one it
  ends with (a gradient is counted before autograd attaches it to ``.grad``).
- ``segments``: what is alive at the end, one segment per storage (memfit models no caching: the segment
  is the block, so the viewer's reserved memory is memfit's booked bytes), each with one
  ``active_allocated`` block.

Addresses are made up: storage ``k`` gets the next 512-aligned address after the previous one, never reused,
so an address names one storage for the whole trace.

The viewer's unpickler (torch/utils/viz/MemoryViz.js) reads protocols 2 to 4 only: :func:`write_snapshot`
pickles with protocol 4. It also throws on a snapshot whose entries carry categories none of which is
``"unknown"`` (it then pushes to a misspelt ``snapshot.categores``), so the trace opens with one ``snapshot``
entry of category ``"unknown"`` (a marker the viewer lists and otherwise ignores).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memfit.estimate.category import Category
from memfit.runtime.events import LiveStorage
from memfit.runtime.timeline import RecordedEvent

__all__ = ["SNAPSHOT_PICKLE_PROTOCOL", "memory_snapshot", "write_snapshot"]

SNAPSHOT_PICKLE_PROTOCOL = 4  # MemoryViz.js's unpickler: "if (version < 2 || version > 4) throw"
BASE_ADDRESS = 0x7F00_0000_0000  # where the made-up addresses start (the range CUDA hands out on Linux)
ALIGNMENT = 512  # the caching allocator's block granularity (kMinBlockSize, c10/cuda/CUDACachingAllocator.cpp)
LARGE_SEGMENT = 1 << 20  # segments above 1 MiB are "large" (the Segment docstring)
_Frame = dict[str, Any]


class _Frames:
    """One list of frames per (module, operator, phase), shared, so the pickle memoises them."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str | None, str], list[_Frame]] = {}

    def __call__(self, module: str, op: str | None, phase: str) -> list[_Frame]:
        key = (module, op, phase)
        frames = self._cache.get(key)
        if frames is None:
            frames = [{"filename": module, "line": 0, "name": op or "(no operator)"}]
            if not module.startswith("("):
                parts = module.split(".")
                frames += [{"filename": ".".join(parts[:i]), "line": 0, "name": "forward"}
                           for i in range(len(parts) - 1, 0, -1)]
            frames.append({"filename": "memfit", "line": 0, "name": phase})
            self._cache[key] = frames
        return frames


def memory_snapshot(initial: Sequence[LiveStorage], events: Sequence[RecordedEvent],
                    final: Sequence[LiveStorage] = ()) -> dict[str, Any]:
    """The snapshot dictionary (module docstring) of storages ``initial`` alive before ``events`` and
    ``final`` alive after them. Each storage carries the category it ends with (when it is freed, or at the
    end): a gradient is counted before autograd attaches it to ``.grad``, optimizer state before the
    optimizer files it."""
    ends = {e.storage: e.category for e in events if e.kind == "free"}
    ends.update({s.storage: s.category for s in final})
    frames = _Frames()
    trace: list[dict[str, Any]] = [{"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "frames": [],
                                    "category": "unknown"}]
    live: dict[int, dict[str, Any]] = {}
    next_addr = BASE_ADDRESS

    def allocate(storage: int, booked: int, size: int, category: Category | None, frame: list[_Frame],
                 segment_event: bool) -> None:
        nonlocal next_addr
        addr = next_addr
        next_addr += max(ALIGNMENT, -(-booked // ALIGNMENT) * ALIGNMENT)
        category = ends.get(storage, category)
        cat = str(category) if category is not None else "unknown"
        block = {"addr": addr, "booked": booked, "size": size, "category": cat, "frames": frame}
        live[storage] = block
        if segment_event:
            trace.append({"action": "segment_alloc", "addr": addr, "size": booked, "stream": 0, "frames": frame})
        trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "frames": frame,
                      "category": cat})

    def free(storage: int) -> None:
        block = live.pop(storage, None)
        if block is None:  # alive before the recording and not listed: nothing to pair it with
            return
        for action in ("free_requested", "free_completed"):
            trace.append({"action": action, "addr": block["addr"], "size": block["size"], "stream": 0,
                          "frames": block["frames"], "category": block["category"]})
        trace.append({"action": "segment_free", "addr": block["addr"], "size": block["booked"], "stream": 0,
                      "frames": block["frames"]})

    for s in initial:
        module = s.tag or "(before the step)"
        allocate(s.storage, s.nbytes, s.size, s.category, frames(module, None, "setup"), segment_event=True)
    for e in events:
        frame = frames(e.module, e.op, e.phase)
        if e.kind == "alloc":
            allocate(e.storage, e.nbytes, e.size, e.category, frame, segment_event=True)
        elif e.kind == "free":
            free(e.storage)
        else:  # resized in place: the allocator hands out a new block of the new size
            old = live.get(e.storage)
            if old is None:
                continue
            booked, size, cat = old["booked"] + e.nbytes, old["size"] + e.size, e.category
            free(e.storage)
            allocate(e.storage, booked, size, cat, frame, segment_event=True)
    segments = []
    for block in live.values():
        segments.append({
            "device": 0, "address": block["addr"], "total_size": block["booked"],
            "allocated_size": block["booked"], "active_size": block["booked"], "requested_size": block["size"],
            "stream": 0, "segment_type": "large" if block["booked"] > LARGE_SEGMENT else "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": block["frames"],
            "blocks": [{"address": block["addr"], "size": block["booked"], "requested_size": block["size"],
                        "state": "active_allocated", "frames": block["frames"]}],
        })
    return {"segments": segments, "device_traces": [trace]}


def write_snapshot(path: str | os.PathLike[str], snapshot: dict[str, Any], *, force: bool = False,
                   flag: str = "--snapshot") -> Path:
    """Pickle ``snapshot`` (protocol 4) to ``path`` atomically; an existing file only with ``force``."""
    from memfit.files import write_atomic

    return write_atomic(path, pickle.dumps(snapshot, protocol=SNAPSHOT_PICKLE_PROTOCOL), force=force, flag=flag)
