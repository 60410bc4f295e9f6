"""memfit measure on CPU: a real sweep with the checkpointing trade, the tracker against torch.profiler,
and fake-tensor steps against real ones. Writes the ``## measure`` section of bench/RESULTS.md.

    OMP_NUM_THREADS=2 .venv/bin/python bench/bench_measure.py [--write]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from memfit.estimate import RunSpec, resolve_config  # noqa: E402
from memfit.measure.model import build_model, tiny_config  # noqa: E402
from memfit.measure.step import make_optimizer, run_step  # noqa: E402
from memfit.measure.sweep import run_sweep  # noqa: E402
from memfit.measure.tracker import LiveTensorTracker  # noqa: E402
from memfit.units import human_bytes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

SMALL = {
    "llama": tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176, vocab=512),
    "qwen2": tiny_config("qwen2", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=160, vocab=512),
    "gpt2": tiny_config("gpt2", layers=2, hidden=64, heads=4, vocab=512),
    "gpt_neox": tiny_config("gpt_neox", layers=2, hidden=64, heads=4, vocab=512),
}


def sweep_section(model: str, spec: RunSpec, batches: list[int], seq: int) -> list[str]:
    config = resolve_config(model)
    t0 = time.perf_counter()
    result = run_sweep(config, spec, model=model, batches=batches, seqs=[seq], checkpointing=["none", "full"],
                       device="cpu", steps=3)
    wall = time.perf_counter() - t0
    flags = (f"--method {spec.method} --precision {spec.precision} --attention {spec.attention} "
             f"--batch {','.join(map(str, batches))} --seq {seq} --checkpointing both --device cpu --steps 3")
    out = [f"`memfit measure {model} {flags}` ({len(result.runs)} points, each in a fresh subprocess, "
           f"{wall:.0f} s on 2 shared cores)", "",
           "| batch | seq | checkpointing | peak | estimate | meas/est | peak phase | s/step | tokens/s |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in result.runs:
        ratio = f"{r.ratio:.3f}" if r.ratio else "-"
        out.append(f"| {r.batch} | {r.seq} | {r.checkpointing} | {human_bytes(r.peak_bytes or 0)} | "
                   f"{human_bytes(r.estimate_bytes) if r.estimate_bytes else '-'} | {ratio} | {r.peak_phase} | "
                   f"{r.step_seconds:.3f} | {r.tokens_per_second:,.0f} |")
    out.append("")
    for f in result.fits:
        out.append(f"- fit, checkpointing {f.checkpointing}: {human_bytes(f.slope_bytes_per_sample)} per sample, "
                   f"intercept {human_bytes(f.intercept_bytes)}, R^2 = {f.r2:.5f}; activation constant "
                   f"**{f.bytes_per_layer_token_hidden:.1f} B** per layer x token x hidden (lesson: ~20)")
    for t in result.trades:
        out.append(f"- batch {t.batch}: {t.verdict} ({human_bytes(t.saved_bytes)} saved, time x{t.slowdown:.2f})")
    big = max((r for r in result.runs if r.fits and r.checkpointing == "none"), key=lambda r: r.batch)
    cats = ", ".join(f"{k} {human_bytes(v)}" for k, v in big.by_category.items() if v)
    out += [f"- alive at the peak, batch {big.batch} without checkpointing: {cats}", ""]
    return out


def profiler_peak(fn) -> int:  # type: ignore[no-untyped-def]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for _, n in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                       if e.name() == "[memory]"):
        live += n
        peak = max(peak, live)
    return peak


def tracker_rows() -> list[str]:
    out = ["Tracker vs torch.profiler (CPU allocator events, `profile_memory=True`): peak bytes above the "
           "model states over one steady-state step, batch 2, seq 64.", "",
           "| arch | method | precision | attention | profiler | tracker | tracker/profiler |",
           "|---|---|---|---|---|---|---|"]
    for arch, cfg in SMALL.items():
        for method, precision, attention in (("full", "fp32", "eager"), ("lora", "mixed-bf16", "sdpa")):
            spec = RunSpec(method=method, precision=precision, attention=attention, device="cpu", batch=2, seq=64)
            model = build_model(cfg, spec)
            opt = make_optimizer(model, spec)
            run_step(model, spec, optimizer=opt, batch=2, seq=64, vocab=512, device="cpu")
            tracker = LiveTensorTracker()
            tracker.track_model(model)
            tracker.track_optimizer(opt)
            before = tracker.live_bytes
            prof = profiler_peak(lambda m=model, o=opt, s=spec, t=tracker: run_step(
                m, s, optimizer=o, batch=2, seq=64, vocab=512, device="cpu", tracker=t))
            mine = tracker.peak_bytes - before
            out.append(f"| {arch} | {method} | {precision} | {attention} | {prof:,} | {mine:,} | {mine / prof:.5f} |")
    return out + [""]


def fake_rows() -> list[str]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    out = ["Fake tensors vs real (the same tracker; `build_model` under `FakeTensorMode`), two steps:", "",
           "| arch | method | checkpointing | real peak | fake peak | equal |", "|---|---|---|---|---|---|"]
    for arch, cfg in SMALL.items():
        for method, ckpt in (("full", "none"), ("lora", "full")):
            spec = RunSpec(method=method, precision="fp32", attention="eager", device="cpu", batch=2, seq=64,
                           checkpointing=ckpt)

            def peak(model: torch.nn.Module, spec: RunSpec = spec) -> int:
                opt = make_optimizer(model, spec)
                tracker = LiveTensorTracker()
                tracker.track_model(model)
                tracker.track_optimizer(opt)
                for _ in range(2):
                    run_step(model, spec, optimizer=opt, batch=2, seq=64, vocab=512, device="cpu", tracker=tracker)
                return tracker.peak_bytes

            real = peak(build_model(cfg, spec))
            with FakeTensorMode(allow_non_fake_inputs=True):
                fake = peak(build_model(cfg, spec))
            out.append(f"| {arch} | {method} | {ckpt} | {real:,} | {fake:,} | {real == fake} |")
    return out + [""]


def write_section(lines: list[str]) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    section = "## measure\n\n" + "\n".join(lines).rstrip() + "\n"
    pattern = re.compile(r"^## measure\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="replace the ## measure section of RESULTS.md")
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    lines = ["`memfit measure` on this machine's CPU (2 shared cores), real training steps on random tokens. "
             "Sizes in MiB/GiB (1024^2, 1024^3 B). Regenerate: "
             "`OMP_NUM_THREADS=2 .venv/bin/python bench/bench_measure.py --write`. CUDA figures: "
             "`bash bench/gpu_check.sh` on a GPU machine.", ""]
    if not args.skip_sweep:
        lines += sweep_section("gpt2", RunSpec(method="lora", precision="bf16", attention="sdpa", device="cpu"),
                               [1, 2, 4], 256)
    lines += tracker_rows()
    lines += fake_rows()
    print("\n".join(lines))
    if args.write:
        write_section(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
