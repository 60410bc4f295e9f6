"""Memory over the step from the engines: the tracker's category ledger, the timeline recorder, downsampling."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memfit.estimate.category import Category  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import build_model, tiny_config  # noqa: E402
from memfit.runtime.scopes import ModuleScopes  # noqa: E402
from memfit.runtime.step import make_optimizer, run_step  # noqa: E402
from memfit.runtime.timeline import TimelineRecorder  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker  # noqa: E402
from memfit.timeline import TimelinePoint, downsample  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402

CFG = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)
ONE_BLOCK = tiny_config("llama", layers=1, hidden=32, heads=2, kv_heads=1, vocab=300)


def _two_real_steps(spec: RunSpec, observe: bool = False, cfg: dict | None = None,
                    ) -> tuple[LiveTensorTracker, TimelineRecorder, list]:
    """Two Trainer-like CPU steps (the first makes AdamW's state in its optimizer phase), as measure runs them."""
    cfg = cfg or CFG
    torch.manual_seed(0)
    model = build_model(cfg, spec, device="cpu")
    optimizer = make_optimizer(model, spec)
    tracker = LiveTensorTracker(vocab=cfg["vocab_size"])
    tracker.track_model(model)
    tracker.track_optimizer(optimizer)
    recorder = TimelineRecorder(tracker, model=model)
    seen: list = []
    if observe:  # the ledger against a full scan of the live storages, at every event of the steps
        unsubscribe = tracker.subscribe(on_storage=lambda e: seen.append(
            (e.kind, e.phase, tracker.live_by_category(), tracker.snapshot().by_category)))
    with tracker, ModuleScopes(model, tracker):
        for _ in range(2):
            run_step(model, spec, optimizer=optimizer, batch=2, seq=32, vocab=cfg["vocab_size"], device="cpu",
                     tracker=tracker)
    recorder.close()
    if observe:
        unsubscribe()
    return tracker, recorder, seen


@pytest.mark.parametrize("spec", [
    pytest.param(RunSpec(method="full", precision="fp32", device="cpu"), id="full", marks=pytest.mark.slow),
    pytest.param(RunSpec(method="lora", precision="fp32", device="cpu"), id="lora")])
def test_the_category_ledger_equals_a_full_scan_at_every_event(spec: RunSpec) -> None:
    """``live_by_category()`` (kept at each change) equals ``snapshot().by_category`` (a scan of every live
    storage, the rule the peak snapshot uses) at every one of the step's events, through gradients attached
    by autograd's hook and AdamW's state made in the first optimizer step."""
    _, _, seen = _two_real_steps(spec, observe=True, cfg=ONE_BLOCK)
    assert len(seen) > 200
    assert {phase for _, phase, _, _ in seen} >= {"forward", "backward", "optimizer"}
    bad = [(kind, phase, ledger, scan) for kind, phase, ledger, scan in seen if ledger != scan]
    assert not bad, bad[:3]
    # not vacuous: gradients and optimizer state were both seen while alive
    assert any(scan[Category.GRADIENTS] > 0 for *_, scan in seen)
    assert any(scan[Category.OPTIMIZER] > 0 for *_, scan in seen)


def test_the_timeline_peak_is_the_trackers_peak_category_by_category() -> None:
    """The highest point of the recorded timeline is the tracker's peak (its lazy snapshot at the first
    free after the peak, an independent code path), byte for byte in every category; the forward is split
    at the output layer, so the loss has its own phase; each point names a module and an operator."""
    tracker, recorder, _ = _two_real_steps(RunSpec(method="full", precision="fp32", device="cpu"))
    points = recorder.points
    top = max(points, key=lambda p: p.total)
    assert top.total == tracker.peak_bytes
    assert top.by_category == tracker.peak.by_category
    phases = [p.phase for p in points]
    assert {"forward", "loss", "backward", "optimizer"} <= set(phases)
    first_loss = phases.index("loss")
    assert phases[first_loss - 1] == "forward" and "backward" in phases[first_loss:]
    assert [p.t for p in points] == sorted(p.t for p in points) and len({p.t for p in points}) == len(points)
    assert any(p.module.startswith("model.layers.1.") for p in points)
    assert any(p.op == "aten.mm.default" for p in points)


def test_downsample_keeps_the_ends_and_the_peak() -> None:
    """The docstring's worked example, then a long series: at most ``limit`` points, the first, the last and
    the peak kept, in time order."""
    def pts(totals: list[int]) -> list[TimelinePoint]:
        return [TimelinePoint(t=i, phase="forward", module="m", op=None, by_category={Category.ACTIVATIONS: v})
                for i, v in enumerate(totals)]

    kept = downsample(pts([1, 5, 2, 2, 9, 1, 3, 4, 0, 2]), limit=5)
    assert [p.t for p in kept] == [0, 1, 4, 7, 9]
    long = pts([(i * 7919) % 1000 for i in range(10_000)] + [5_000] + [1] * 3_000)
    kept = downsample(long, limit=2000)
    assert len(kept) <= 2000 and kept[0].t == 0 and kept[-1].t == len(long) - 1
    assert max(p.total for p in kept) == 5_000
    assert [p.t for p in kept] == sorted(p.t for p in kept)
    assert downsample(long[:10], limit=2000) == long[:10]


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu-step", "gpu-prediction"])
def test_the_trace_carries_a_bounded_timeline_whose_peak_is_the_traced_peak(device: str) -> None:
    """The trace's JSON timeline: its highest point is ``peak_bytes`` with ``components`` as its categories
    (a CUDA prediction books 512-B blocks in both), at most 2,000 points, module paths named."""
    spec = RunSpec(method="lora", precision="fp32", batch=2, seq=64, device=device)
    r = trace_step(CFG, spec)
    assert 10 < len(r.timeline) <= 2000
    top = max(r.timeline, key=lambda p: p.total)
    assert top.total == r.peak_bytes
    assert {k: v for k, v in top.by_category.items() if v} == {k: v for k, v in r.components.items() if v}
    d = r.to_dict()["timeline"]
    assert set(d[0]) == {"t", "phase", "module", "op", "bytes_by_category"}
    assert any(p["module"].startswith("model.layers.0.self_attn") for p in d)

