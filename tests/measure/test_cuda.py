"""CUDA paths of measure (skipped cleanly without a GPU; bench/gpu_check.sh runs them on one)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from memfit.estimate import ModelShape, RunSpec  # noqa: E402
from memfit.measure.point import measure_point  # noqa: E402
from memfit.measure.regression import peak_vs_batch  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402

pytestmark = pytest.mark.cuda

MIB = 1024**2
# big enough that allocator extras (cuBLAS workspaces, 512-byte rounding) are a small share of the peak
MID = tiny_config("llama", layers=4, hidden=512, heads=8, kv_heads=4, intermediate=1376, vocab=32000,
                  max_positions=2048)


def test_cuda_peak_from_allocator_stats_agrees_with_tracker() -> None:
    spec = RunSpec(method="full", precision="fp32", device="cuda", batch=4, seq=256)
    r = measure_point(MID, spec, device="cuda", steps=2)
    assert r.fits and r.peak_bytes is not None and r.tracker_peak_bytes is not None
    assert r.reserved_bytes is not None and r.reserved_bytes >= r.peak_bytes
    # max_memory_allocated sees what the tracker sees plus allocator extras, never less
    assert r.peak_bytes >= r.tracker_peak_bytes
    assert r.peak_bytes - r.tracker_peak_bytes < 256 * MIB  # cuBLAS/cuBLASLt workspaces, kernel scratch
    assert r.tracker_peak_bytes > 0.8 * r.peak_bytes
    n = sum(p.numel() for p in torch.nn.Module.parameters(_model(spec)))
    assert r.by_category["weights_trainable"] == 4 * n  # fp32 weights, every parameter trains


def _model(spec: RunSpec) -> torch.nn.Module:
    from memfit.runtime.build import build_model

    return build_model(MID, spec, device="meta")


def test_cuda_peak_linear_in_batch_lora_mixed_bf16() -> None:
    spec = RunSpec(method="lora", precision="mixed-bf16", device="cuda", seq=256)
    runs = [measure_point(MID, spec.with_(batch=b), device="cuda", steps=2) for b in (2, 4, 8)]
    assert all(r.fits for r in runs)
    (line,) = peak_vs_batch(runs, ModelShape.from_hf_config(MID))
    assert line.r2 >= 0.99
    assert line.slope_bytes_per_sample > 0


def test_cuda_checkpointing_saves_memory() -> None:
    spec = RunSpec(method="lora", precision="bf16", device="cuda", batch=8, seq=512)
    without = measure_point(MID, spec, device="cuda", steps=2)
    with_ = measure_point(MID, spec.with_(checkpointing="full"), device="cuda", steps=2)
    assert without.fits and with_.fits
    assert with_.peak_bytes < without.peak_bytes
    assert with_.step_seconds is not None and with_.step_seconds > 0


def test_cuda_out_of_memory_is_a_result_and_the_limit_is_lifted_after() -> None:
    spec = RunSpec(method="full", precision="bf16", device="cuda", batch=16, seq=512)
    # bf16 logits alone: 16 * 512 * 32000 * 2 B = 500 MiB > the 256 MiB limit
    r = measure_point(MID, spec, device="cuda", steps=1, memory_limit=256 * MIB)
    assert not r.fits
    assert "does not fit at batch 16" in (r.error or "")
    again = measure_point(MID, spec.with_(batch=1, seq=64), device="cuda", steps=1)
    assert again.fits


def test_cuda_cli_subprocess(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memfit.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MID))
    rc = main(["measure", str(cfg), "--batch", "2", "--seq", "128", "--device", "cuda", "--precision",
               "mixed-bf16", "--steps", "2", "--json"])
    assert rc == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["device"] == "cuda" and run["fits"]
    assert run["reserved_bytes"] >= run["peak_bytes"] > 0


def test_measure_snapshot_beside_the_allocators_own(tmp_path) -> None:
    """``measure --snapshot`` on CUDA: memfit's snapshot and the caching allocator's own (recorded over the same
    tracked steps) carry the same keys, and replayed as https://pytorch.org/memory_viz replays them, memfit's
    peaks at the tracker's peak and the allocator's between that and ``max_memory_allocated`` (its requested
    bytes add the workspaces no tensor holds; its blocks round each up)."""
    import pickle
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
    from viz_replay import replay  # type: ignore[import-not-found]

    spec = RunSpec(method="full", precision="fp32", device="cuda", batch=2, seq=128)
    mine, real = tmp_path / "step.pickle", tmp_path / "step.cuda.pickle"
    r = measure_point(MID, spec, device="cuda", steps=1, snapshot_to=str(mine), cuda_snapshot_to=str(real))
    assert r.fits and r.peak_bytes is not None and r.tracker_peak_bytes is not None
    m, c = pickle.loads(mine.read_bytes()), pickle.loads(real.read_bytes())  # written by this test's run
    assert mine.read_bytes()[:2] == real.read_bytes()[:2] == b"\x80\x04"
    assert set(m["segments"][0]) <= set(c["segments"][0])
    assert set(m["segments"][0]["blocks"][0]) <= set(c["segments"][0]["blocks"][0])
    real_keys = {e["action"]: set(e) for e in c["device_traces"][0]}
    for e in m["device_traces"][0]:
        if e["action"] in real_keys:
            assert set(e) - {"category"} <= real_keys[e["action"]], e["action"]
    assert replay(m) == r.tracker_peak_bytes
    assert r.tracker_peak_bytes <= replay(c) <= r.peak_bytes
