"""How long `memfit fit` takes: the ordered path plus the exhaustive search, on a few real scenarios.

Writes the `## fit` section of bench/RESULTS.md. Run: `.venv/bin/python bench/bench_fit.py`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from _results import write_section as write_results_section  # bench/_results.py

os.environ.setdefault("OMP_NUM_THREADS", "1")

from memfit.advise import PeakCache, Setup, candidates, fit  # noqa: E402
from memfit.estimate import RunSpec, Target, resolve_model  # noqa: E402
from memfit.report.fit import describe_changes  # noqa: E402
from memfit.units import BYTES_PER_GIB  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

SCENARIOS = [
    ("Llama-3.1-8B LoRA r64 all-linear, b8 s2048, 24GiB", "llama-3.1-8b",
     RunSpec(method="lora", rank=64, targets=("all-linear",), batch=8, seq=2048), "24GiB"),
    ("Llama-2-7B LoRA r64 q,v, b8 s2048, 24GiB", "llama-2-7b",
     RunSpec(method="lora", rank=64, batch=8, seq=2048), "24GiB"),
    ("Qwen2.5-7B full bf16 AdamW, b4 s4096, 8 x A100-80GB", "qwen2.5-7b",
     RunSpec(method="full", batch=4, seq=4096, grad_accum=4, gpus=8), "A100-80GB"),
    ("Llama-3.1-70B LoRA r16, b4 s4096, T4 (nothing fits)", "llama-3.1-70b",
     RunSpec(method="lora", rank=16, batch=4, seq=4096), "T4"),
    # issue 13: a 262k vocabulary (the logits) and a 12B bf16 base (21.9 GiB of weights) on a 24 GiB card
    ("Gemma-3-12B LoRA r16 q,v, b4 s2048, 24GiB", "gemma-3-12b",
     RunSpec(method="lora", rank=16, batch=4, seq=2048), "24GiB"),
    # issue 13 (second half)
    ("Falcon-7B LoRA r16 query_key_value, b8 s2048, 24GiB", "falcon-7b",
     RunSpec(method="lora", rank=16, batch=8, seq=2048), "24GiB"),
    ("Qwen3-30B-A3B LoRA r16 attention, b4 s4096, A100-80GB", "qwen3-30b-a3b",
     RunSpec(method="lora", rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj"), batch=4, seq=4096),
     "A100-80GB"),
    ("gpt-oss-20b LoRA r16 attention, b4 s4096, A100-80GB (experts dequantised to bf16)", "gpt-oss-20b",
     RunSpec(method="lora", rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj"), batch=4, seq=4096,
             attention="eager"), "A100-80GB"),
    ("Moonlight-16B-A3B LoRA r16 attention, b4 s4096, A100-80GB", "moonlight-16b-a3b",
     RunSpec(method="lora", rank=16, targets=("q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"), batch=4,
             seq=4096), "A100-80GB"),
    ("OLMo-2-7B LoRA r16 all-linear, b4 s4096, 24GiB", "olmo-2-7b",
     RunSpec(method="lora", rank=16, targets=("all-linear",), batch=4, seq=4096), "24GiB"),
    ("phi-2 full bf16 AdamW, b8 s2048, 24GiB", "phi-2", RunSpec(method="full", batch=8, seq=2048), "24GiB"),
    ("Granite-3.3-8B LoRA r16 q,v, b8 s2048, A100-40GB", "granite-3.3-8b",
     RunSpec(method="lora", rank=16, targets=("q_proj", "v_proj"), batch=8, seq=2048), "A100-40GB"),
]


def run() -> list[str]:
    rows = ["| scenario | fits initially | ordered steps | fits | cheapest changes | candidates | estimates | "
            "time (s, median of 3) | every candidate estimated (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for label, model, spec, gpu in SCENARIOS:
        shape = resolve_model(model)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            report = fit(shape, spec, Target.resolve(gpu))
            times.append(time.perf_counter() - t)
        t = time.perf_counter()  # the cost of a truly exhaustive pass: every candidate's per-GPU peak
        cache = PeakCache(shape)
        for setup in candidates(Setup(spec=spec), data=None, kernels=shape.arch.attention_kernels):
            cache.peak(setup.spec)
        full_pass = time.perf_counter() - t
        steps = " -> ".join(s.action for s in report.steps) or "-"
        changes = (describe_changes(report.initial, report.cheapest.setup) if report.cheapest.setup
                   else "nothing fits")
        final = f"{report.final_peak_bytes / BYTES_PER_GIB:.1f} GiB"
        c = report.cheapest
        rows.append(f"| {label} | {report.fits_initially} | {steps} | {report.fits} ({final}) | {changes} | "
                    f"{c.candidates:,} | {c.evaluated:,} | {statistics.median(times):.2f} | {full_pass:.2f} |")
        print(rows[-1], flush=True)
    return rows


def write_section(rows: list[str]) -> None:
    write_results_section("fit", "\n".join([
        "`memfit fit`: the lesson's ordered path and the exhaustive cheapest search together, on 2 shared CPU cores",
        "(`.venv/bin/python bench/bench_fit.py`). Candidates are costed without estimating, sorted, and estimated",
        "in cost order until the first fits, so `estimates` counts distinct RunSpecs actually estimated.",
        "",
        *rows,
    ]))


if __name__ == "__main__":
    write_section(run())
    sys.exit(0)
