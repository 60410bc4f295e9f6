"""Issue 14 parts 5 and 7: the --offload agreement rows, and the caching-allocator replays side by side.

1. ``--offload`` rows (:data:`memfit.validate.rows_offload.OFFLOAD_ROWS`): measured on this CPU (device bytes, and
   the host copies apart), estimate and trace errors against the measured device peak.
2. The CUDA reserved figure on scaled configs, three ways: the old stated rule (peak + 5% + 256 MiB, without the
   512 MiB context), the replay of the trace's allocation sequence, the replay of the estimate's synthesised
   sequence. These are predictions: no GPU measured them (bench/allocator_cuda.py does, in bench/gpu_run.sh).

Writes the ``## offload and allocator`` section of RESULTS.md (``--no-write`` to print only).
"""

from __future__ import annotations

import argparse
import sys
import time

from _results import write_section
from memfit.estimate import estimate_memory, lookup
from memfit.estimate.fits import CUDA_CONTEXT_BYTES
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.estimate.synth_allocations import estimate_allocator
from memfit.measure.point import measure_point
from memfit.trace.engine import trace_step
from memfit.validate.agreement import offload_matrix, run_row, scaled_config

MiB = 1024**2

ALLOC_ROWS = (
    ("llama-3.2-1b", 256, 2, {"method": "lora", "precision": "bf16", "batch": 4, "seq": 256}),
    ("qwen2.5-0.5b", 256, 2, {"method": "full", "precision": "fp32", "batch": 2, "seq": 128}),
    ("llama-3.2-1b", 256, 4, {"method": "lora", "precision": "bf16", "batch": 4, "seq": 512,
                              "checkpointing": "full"}),
    ("gpt2", 256, 2, {"method": "full", "precision": "fp32", "batch": 2, "seq": 256}),
)


def offload_rows() -> list[str]:
    lines = ["| row | measured device peak | host copies | estimate | trace |", "|---|---:|---:|---:|---:|"]
    for row in offload_matrix():
        t0 = time.perf_counter()
        measured = measure_point(row.config, row.spec, steps=0, warmup=0)
        r = run_row(row, measured=measured)
        lines.append(f"| {row.label} | {measured.peak_bytes:,} B | {measured.host_bytes:,} B | "
                     f"{r.estimate_error:+.4%} | {(r.trace_error or 0.0):+.4%} |")
        print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return lines


def allocator_rows() -> list[str]:
    lines = ["| scaled config (CUDA prediction) | allocated peak | old rule | trace replay | synthesised replay | "
             "best setting (trace) |", "|---|---:|---:|---:|---:|---|"]
    for model, hidden, layers, fields in ALLOC_ROWS:
        cfg = scaled_config(model, hidden, layers)
        spec = lookup(model).shape.arch.runnable_spec(RunSpec(device="cuda", attention="sdpa", **fields))
        est = estimate_memory(ModelShape.from_hf_config(cfg, name=model), spec)
        synth = estimate_allocator(est)
        traced = trace_step(cfg, spec, name=model)
        alloc = traced.allocator or {}
        d, b = alloc.get("default", {}), alloc.get("best", {})
        rule = est.reserved_bytes - CUDA_CONTEXT_BYTES
        syn = synth.default.reserved_peak_bytes if synth else 0
        lines.append(f"| {model} h{hidden} L{layers} {fields} | {d.get('allocated_peak_bytes', 0) / MiB:,.1f} MiB | "
                     f"{rule / MiB:,.1f} MiB | {d.get('reserved_peak_bytes', 0) / MiB:,.1f} MiB | "
                     f"{syn / MiB:,.1f} MiB | "
                     f"{b.get('conf') or 'defaults'}: {b.get('reserved_peak_bytes', 0) / MiB:,.1f} MiB |")
        print(lines[-1], flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    body = ["CPU-measured: the --offload rows (device bytes measured by the live-storage tracker on this CPU; the "
            "host copies save_on_cpu makes are booked apart, memfit.runtime.offload). CUDA figures below are "
            "predictions (caching-allocator replays, memfit.estimate.allocator), not measured on a GPU: "
            "bench/allocator_cuda.py in bench/gpu_run.sh checks them against torch.cuda.max_memory_reserved.", "",
            "### --offload (checkpoints in host memory)", "", *offload_rows(), "",
            "### CUDA reserved bytes without the 512 MiB context: stated rule vs allocator replays", "",
            *allocator_rows()]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        write_section("offload and allocator", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
