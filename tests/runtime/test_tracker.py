"""LiveTensorTracker against hand-worked byte counts, torch.profiler's allocator events, and FakeTensorMode."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from memfit.estimate import RunSpec  # noqa: E402
from memfit.runtime.build import build_model, tiny_config  # noqa: E402
from memfit.runtime.step import make_optimizer, run_step  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker, SimulatedOutOfMemoryError  # noqa: E402


def test_hand_worked_linear_views_counted_once_and_frees_subtracted() -> None:
    lin = torch.nn.Linear(4, 8)  # fp32: weight 8*4*4 = 128 B, bias 8*4 = 32 B
    x = torch.randn(2, 4)  # created outside the mode: not counted unless registered
    tracker = LiveTensorTracker()
    tracker.track_model(lin)
    assert tracker.live_bytes == 160
    with tracker:
        y = lin(x)  # (2, 8) fp32 = 64 B
        assert tracker.live_bytes == 160 + 64
        v1, v2 = y.view(16), y[0]  # views share the storage: nothing new
        assert tracker.live_bytes == 224
        z = y * 2  # a new (2, 8) storage
        assert tracker.live_bytes == 288
        del y, v1
        assert tracker.live_bytes == 288  # v2 still views y's storage
        del v2
        assert tracker.live_bytes == 224  # y's storage freed with its last view; z (64 B) alive
        del z
        assert tracker.live_bytes == 160
    assert tracker.peak_bytes == 288
    assert tracker.peak.by_category["weights_trainable"] == 160


def test_categories_gradients_and_optimizer_classified() -> None:
    lin = torch.nn.Linear(4, 8)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    tracker = LiveTensorTracker()
    tracker.track_model(lin)
    tracker.track_optimizer(opt)
    with tracker:
        with tracker.phase("forward"):
            loss = lin(torch.randn(2, 4)).sum()
        with tracker.phase("backward"):
            loss.backward()
        with tracker.phase("optimizer"):
            opt.step()
            snap_states = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values())
    # AdamW: exp_avg + exp_avg_sq in fp32 = 2 * 160 B, plus one fp32 step scalar per parameter (2 x 4 B)
    assert snap_states == 2 * 160 + 2 * 4
    assert tracker.peak_phase == "optimizer"
    assert tracker.peak.by_category["optimizer"] == 2 * 160 + 8
    assert tracker.peak.by_category["gradients"] == 160
    assert set(tracker.phase_peaks) >= {"forward", "backward", "optimizer"}


def _profiler_peak(fn) -> int:  # type: ignore[no-untyped-def]
    """Peak of the running sum of the CPU allocator's events recorded by torch.profiler (the oracle)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    assert len(events) > 50  # guard: the profiler did record the step's allocations
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize(("method", "precision", "attention"), [
    ("full", "fp32", "eager"), ("lora", "mixed-bf16", "sdpa"),
])
def test_tracker_agrees_with_profiler_memory_events(method: str, precision: str, attention: str) -> None:
    cfg = tiny_config("llama", layers=2, hidden=64, vocab=256)
    spec = RunSpec(method=method, precision=precision, attention=attention, device="cpu", batch=2, seq=32)
    model = build_model(cfg, spec)
    opt = make_optimizer(model, spec)
    run_step(model, spec, optimizer=opt, batch=2, seq=32, vocab=256, device="cpu")  # optimizer state exists
    tracker = LiveTensorTracker(vocab=256)
    tracker.track_model(model)
    tracker.track_optimizer(opt)
    before = tracker.live_bytes
    peak = _profiler_peak(lambda: run_step(model, spec, optimizer=opt, batch=2, seq=32, vocab=256, device="cpu",
                                           tracker=tracker))
    measured = tracker.peak_bytes - before
    # the profiler also sees a few scalar tensors ops create internally (4-8 B each): agree within 0.1%
    assert measured == pytest.approx(peak, rel=1e-3)
    assert measured > 500_000  # guard: a real step, not an empty region


def test_fake_tensor_step_matches_real_step_exactly() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    cfg = tiny_config("llama", layers=2, hidden=64, vocab=256)
    spec = RunSpec(method="lora", precision="fp32", attention="eager", device="cpu", batch=2, seq=32)

    def peak_of(model: torch.nn.Module) -> tuple[int, dict[str, int]]:
        opt = make_optimizer(model, spec)
        tracker = LiveTensorTracker(vocab=256)
        tracker.track_model(model)
        tracker.track_optimizer(opt)
        for _ in range(2):
            run_step(model, spec, optimizer=opt, batch=2, seq=32, vocab=256, device="cpu", tracker=tracker)
        return tracker.peak_bytes, dict(tracker.peak.by_category)

    real = peak_of(build_model(cfg, spec))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake_model = build_model(cfg, spec)
        assert type(next(fake_model.parameters())).__name__ == "FakeTensor"
        fake = peak_of(fake_model)
    assert fake == real


def test_memory_limit_raises_simulated_oom() -> None:
    tracker = LiveTensorTracker(memory_limit=1000)
    with pytest.raises(SimulatedOutOfMemoryError) as info, tracker:
        _ = torch.empty(100)  # 400 B fits
        _ = torch.empty(200)  # 400 + 800 B > 1000 B
    assert info.value.limit_bytes == 1000
    assert info.value.live_bytes == 1200


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "sgd", "adamw"])
def test_zero_grad_set_to_none_under_the_tracker_does_not_crash(optimizer: str) -> None:
    """Regression: the peak snapshot used to read p.grad inside the finalizer of that very gradient while
    zero_grad(set_to_none=True) tore it down, which crashed the interpreter (SIGSEGV) with SGD momentum.
    Run in a subprocess so a crash fails this test instead of killing the session."""
    import subprocess
    import sys

    code = (
        "from memfit.runtime.build import tiny_config\n"
        "from memfit.measure.point import measure_point\n"
        "from memfit.estimate import RunSpec\n"
        "cfg = tiny_config('llama', layers=2, hidden=64, heads=4, kv_heads=2, vocab=256)\n"
        f"r = measure_point(cfg, RunSpec(method='full', precision='fp32', device='cpu', optimizer='{optimizer}',"
        " batch=2, seq=32), steps=0, warmup=0)\n"
        "print(r.by_category['gradients'], r.peak_bytes)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    grads, peak = map(int, out.stdout.split()[-2:])
    assert peak > 0 and grads >= 0
