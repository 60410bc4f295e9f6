"""Benchmarks of ``memfit trace``.

``python bench/bench_trace.py`` times full-size traces (Llama-3.1-8B LoRA b1 s2048, Llama-3.1-70B LoRA
b1 s2048), each in a fresh subprocess, with the process's peak RSS (the figures the issue targets:
<= 30 s and < 2 GiB for 8B, <= 120 s for 70B, on 2 cores), and writes them to bench/RESULTS.md's
``## trace`` section with ``--write``.

``python bench/bench_trace.py --cuda-check`` (on a CUDA machine) measures real CUDA steps with
``memfit.measure`` (``torch.cuda.max_memory_allocated``) beside trace's ``--device cuda`` prediction and
its ``--device cpu`` one, for a few real-size small models, and prints JSON (to ``$OUT`` when set).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _results import write_section as write_results_section  # bench/_results.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CASES = {
    "llama-3.1-8b lora b1 s2048": ("llama-3.1-8b", {"method": "lora", "batch": 1, "seq": 2048}),
    "llama-3.1-70b lora b1 s2048": ("llama-3.1-70b", {"method": "lora", "batch": 1, "seq": 2048}),
}

CUDA_CASES = [
    ("qwen2.5-0.5b", {"method": "lora", "precision": "bf16", "batch": 1, "seq": 2048}),
    ("qwen2.5-0.5b", {"method": "full", "precision": "bf16", "batch": 1, "seq": 1024}),
    ("qwen2.5-0.5b", {"method": "lora", "precision": "bf16", "batch": 2, "seq": 1024, "padding_mask": True}),
    ("llama-3.2-1b", {"method": "lora", "precision": "fp32", "batch": 1, "seq": 1024}),
    ("llama-3.2-1b", {"method": "lora", "precision": "bf16", "batch": 2, "seq": 2048, "checkpointing": "full"}),
    ("llama-3.2-1b", {"method": "lora", "precision": "mixed-bf16", "batch": 1, "seq": 2048}),
    ("qwen2.5-0.5b", {"method": "lora", "precision": "bf16", "batch": 1, "seq": 1024, "attention": "eager"}),
]


def one(model: str, fields: dict[str, object]) -> dict[str, object]:
    """Trace one case in this process: wall seconds and peak RSS."""
    from memfit.estimate.catalogue import resolve_config
    from memfit.estimate.spec import RunSpec
    from memfit.trace.engine import trace_step

    config = resolve_config(model)
    trace_step(resolve_config("gpt2"), RunSpec(batch=1, seq=16))  # first-call imports and kernel registrations
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    result = trace_step(config, RunSpec(**fields), name=model)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    return {"model": model, "spec": fields, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "build_seconds": round(result.build_seconds, 2), "step_seconds": round(result.step_seconds, 2),
            "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_bytes": result.peak_bytes, "peak_phase": result.peak_phase}


def cuda_check() -> list[dict[str, object]]:
    import torch

    from memfit.estimate.catalogue import resolve_config
    from memfit.estimate.spec import RunSpec
    from memfit.measure.point import measure_point
    from memfit.trace.engine import trace_step

    rows: list[dict[str, object]] = []
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    before = torch.cuda.memory_allocated()
    (a @ a).sum().item()
    torch.cuda.synchronize()
    rows.append({"cublas_workspace_bytes": torch.cuda.memory_allocated() - before,
                 "torch": torch.__version__})
    del a
    for model, fields in CUDA_CASES:
        cfg = resolve_config(model)
        spec = RunSpec(**fields, device="cuda")  # type: ignore[arg-type]
        row: dict[str, object] = {"model": model, "spec": fields}
        try:
            m = measure_point(cfg, spec, device="cuda", steps=1, warmup=0)
            row.update(measured=m.peak_bytes, tracker=m.tracker_peak_bytes, measured_phase=m.peak_phase,
                       measured_by_category=m.by_category)
        except Exception as exc:  # a check script: report and go on
            row["measure_error"] = f"{type(exc).__name__}: {exc}"[:300]
        for dev in ("cuda", "cpu"):
            try:
                t = trace_step(cfg, spec.with_(device=dev))
                row[f"trace_{dev}"] = t.peak_bytes
                row[f"trace_{dev}_components"] = t.components
            except Exception as exc:
                row[f"trace_{dev}_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if isinstance(row.get("measured"), int) and isinstance(row.get("trace_cuda"), int):
            row["error_cuda"] = round(row["trace_cuda"] / row["measured"] - 1, 4)  # type: ignore[operator]
            row["error_cpu"] = round(row["trace_cpu"] / row["measured"] - 1, 4)  # type: ignore[operator]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def write_results(rows: list[dict[str, object]]) -> None:
    lines = [
             "`python bench/bench_trace.py --write`: one `trace_step` per fresh process (after a warm-up trace of "
             "GPT-2 at seq 16, so imports are not counted); wall seconds of the trace (build + one steady-state "
             "step), the CPU seconds the process spent in it (the trace is single-threaded, so CPU seconds are "
             "the wall time on an idle core, whatever else shares the machine), and the process's peak RSS "
             "(GiB = 1024^3 B). Default spec: bf16, AdamW, sdpa, --device cuda prediction.", "",
             "| case | wall s | CPU s | build s | step s | peak RSS | traced peak | phase |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['seconds']} | {r['cpu_seconds']} | {r['build_seconds']} | "
                     f"{r['step_seconds']} | "
                     f"{int(r['rss_bytes']) / 1024**3:.2f} GiB | {int(r['peak_bytes']) / 1024**3:.2f} GiB | "
                     f"{r['peak_phase']} |")
    write_results_section("trace", "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cuda-check", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the figures into bench/RESULTS.md")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.one:
        model, fields = CASES[args.one]
        print(json.dumps(one(model, fields)))
        return
    if args.cuda_check:
        rows = cuda_check()
        out = os.environ.get("OUT")
        if out:
            Path(out, "cuda_check.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
        return
    results = []
    for case in CASES:
        proc = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True,
                              check=True)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["case"] = case
        print(json.dumps(row), flush=True)
        results.append(row)
    if args.write:
        write_results(results)


if __name__ == "__main__":
    main()
