"""memfit's step as a CUDA memory snapshot pickle, read back with torch's own ``torch.cuda._memory_viz``
(torch 2.13.0) and replayed as https://pytorch.org/memory_viz replays it."""

from __future__ import annotations

import base64
import copy
import json
import os
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.cuda import _memory_viz  # noqa: E402
from viz_replay import replay  # noqa: E402

from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402
from memfit.runtime.snapshot import write_snapshot  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402

CFG = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)

# The opcodes the viewer's unpickler handles (torch/utils/viz/MemoryViz.js, function unpickle: PROTO 2..4,
# then these cases; anything else throws "UNKNOWN OPCODE"), by pickletools' names.
VIEWER_OPCODES = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET", "BININT",
                  "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK",
                  "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT", "SHORT_BINUNICODE",
                  "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT"}


@pytest.fixture(scope="module")
def cpu_trace() -> Any:
    return trace_step(CFG, RunSpec(method="full", precision="fp32", batch=2, seq=64, device="cpu"), snapshot=True)


@pytest.fixture(scope="module")
def gpu_prediction() -> Any:
    return trace_step(CFG, RunSpec(method="lora", precision="bf16", batch=2, seq=64, device="cuda"), snapshot=True)


def test_the_pickle_replays_to_the_traced_peak_with_torchs_helpers(cpu_trace: Any, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Written, loaded back, read by torch.cuda._memory_viz: ``segsum`` (which asserts that every segment's
    blocks add up), ``trace`` (the allocator trace replayed as text), ``filter_alloc_free_pairs`` (what is
    never freed is what the segments hold) and ``trace_plot`` (the viewer page embeds the same snapshot); the
    viewer's replay peaks at the trace's ``peak_bytes``."""
    path = write_snapshot(tmp_path / "step.pickle", cpu_trace.snapshot)
    raw = path.read_bytes()
    snap = pickle.loads(raw)  # memfit's own output, written just now
    assert snap == cpu_trace.snapshot
    trace = snap["device_traces"][0]
    assert replay(snap) == cpu_trace.peak_bytes  # a CPU step: requested bytes are the booked bytes
    assert replay(snap, segments=True) == cpu_trace.peak_bytes

    summary = _memory_viz.segsum(snap)
    assert f"segments: {len(snap['segments'])}" in summary
    text = _memory_viz.trace(snap)
    assert f"{len(trace)} entries" in text and "cudaFree(" in text and "\ndel " in text
    kept = _memory_viz.filter_alloc_free_pairs(copy.deepcopy(snap))["device_traces"][0]
    assert "without free_requested" not in capsys.readouterr().out
    assert sorted(e["addr"] for e in kept if e["action"] == "alloc") == sorted(s["address"] for s in snap["segments"])
    page = _memory_viz.trace_plot(snap)
    embedded = json.loads(re.search(r"const local_files = (\[.*?\])\n", page).group(1))[0]["base64"]
    assert pickle.loads(base64.b64decode(embedded)) == snap

    # the end state: what is alive after the step (weights, gradients freed, the optimizer state)
    alive = sum(b["size"] for s in snap["segments"] for b in s["blocks"])
    assert alive == sum(s["total_size"] for s in snap["segments"]) > 0
    assert {s["frames"][-1]["name"] for s in snap["segments"]} >= {"setup"}


def test_a_gpu_prediction_books_512_byte_blocks_and_requests_the_storage_bytes(gpu_prediction: Any) -> None:
    """On a CUDA prediction the segments are memfit's booked 512-B blocks (the viewer's reserved memory peaks
    at ``peak_bytes``); the allocations are the storages' own bytes, as the allocator records them, so their
    peak is lower by at most 511 B per storage alive then."""
    snap = gpu_prediction.snapshot
    assert replay(snap, segments=True) == gpu_prediction.peak_bytes
    requested = replay(snap)
    live_at_most = sum(1 for e in snap["device_traces"][0] if e["action"] == "alloc")
    assert gpu_prediction.peak_bytes - 511 * live_at_most <= requested <= gpu_prediction.peak_bytes
    assert all(e["size"] % 512 == 0 for e in snap["device_traces"][0] if e["action"].startswith("segment"))


def test_the_viewer_can_unpickle_it(cpu_trace: Any, tmp_path: Path) -> None:
    """Protocol 4 (the viewer throws on 5) and only the opcodes its unpickler knows; torch's key names."""
    raw = write_snapshot(tmp_path / "s.pickle", cpu_trace.snapshot).read_bytes()
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert ops[0] == ("PROTO", 4)
    assert {name for name, _ in ops} <= VIEWER_OPCODES
    snap = cpu_trace.snapshot
    # keys of torch.cuda.memory._snapshot's Segment / Block / TraceEntry / Frame (its docstring), plus the
    # "category" of torch's profile_plot snapshots
    assert set(snap) == {"segments", "device_traces"}
    assert {"device", "address", "total_size", "stream", "segment_type", "segment_pool_id", "allocated_size",
            "active_size", "blocks"} <= set(snap["segments"][0])
    assert set(snap["segments"][0]["blocks"][0]) == {"address", "size", "requested_size", "state", "frames"}
    actions = {e["action"] for e in snap["device_traces"][0]}
    assert actions == {"snapshot", "segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"}
    for e in snap["device_traces"][0]:
        assert {"action", "addr", "size", "stream", "frames"} <= set(e)
        assert all(set(f) == {"filename", "line", "name"} for f in e["frames"])
    assert "unknown" in {e.get("category") for e in snap["device_traces"][0]}  # see memfit.runtime.snapshot


def test_frames_name_the_operator_the_module_path_and_the_phase(cpu_trace: Any) -> None:
    allocs = [e for e in cpu_trace.snapshot["device_traces"][0] if e["action"] == "alloc"]
    mlp = [e for e in allocs if e["frames"][0]["filename"] == "model.layers.1.mlp.down_proj"]
    assert mlp, "no allocation named by the down projection of block 1"
    frames = mlp[0]["frames"]
    assert frames[0]["name"].startswith("aten.")
    assert [f["filename"] for f in frames[1:4]] == ["model.layers.1.mlp", "model.layers.1", "model.layers"]
    assert frames[-1] == {"filename": "memfit", "line": 0, "name": "forward"}
    assert {e["category"] for e in allocs} >= {"weights_trainable", "activations", "logits", "optimizer",
                                               "gradients"}


def test_an_existing_snapshot_is_replaced_only_with_force(cpu_trace: Any, tmp_path: Path) -> None:
    target = tmp_path / "step.pickle"
    target.write_bytes(b"mine")
    with pytest.raises(MemfitError, match="--force"):
        write_snapshot(target, cpu_trace.snapshot)
    assert target.read_bytes() == b"mine"
    write_snapshot(target, cpu_trace.snapshot, force=True)
    assert pickle.loads(target.read_bytes()) == cpu_trace.snapshot
    assert os.listdir(tmp_path) == ["step.pickle"]  # no temporary file left beside it
