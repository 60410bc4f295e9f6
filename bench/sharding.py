"""Sharded agreement rows (:mod:`memfit.validate.rows_sharding`): the estimate's per-GPU peak against every rank's
measured peak, over 2 and 4 real gloo processes per row. Writes ``## sharding`` of RESULTS.md.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sharding.py [--gpus 2,4] [--models llama-3.2-1b] [--rows base,accelerate]

Row sets (rows_sharding.ROW_SETS): base, accelerate, mixed, lora, layers (LoRA on layers 0,2 of a 4-layer scaled Llama
3.2 with a 1,024-token vocabulary, 2 ranks), moe (a full bf16 fine-tune of a 4-layer scaled Mixtral, 2 ranks).
"""

from __future__ import annotations

import argparse
import time

from _results import write_section
from memfit.validate.rows_sharding import ShardedRow, run_sharded_matrix, summarise_sharded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", default="2,4", help="world sizes, e.g. 2,4")
    ap.add_argument("--models", default=None, help="only these scaled models (comma-separated)")
    ap.add_argument("--rows", default=None, help="only these row sets (comma-separated; rows_sharding.ROW_SETS)")
    ap.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = ap.parse_args()
    t0 = time.perf_counter()

    def show(r: ShardedRow) -> None:
        traced = "" if r.trace_bytes is None else f"  trace {r.trace_bytes:>13,}  {r.trace_error:+.4%}"
        print(f"{r.label:58s} measured {r.measured_bytes:>13,}  estimate {r.estimate_bytes:>13,}  {r.error:+.3%}"
              f"{traced}", flush=True)

    rows = run_sharded_matrix(gpus=tuple(int(x) for x in args.gpus.split(",")),
                              models=tuple(args.models.split(",")) if args.models else None, on_row=show,
                              rows=tuple(args.rows.split(",")) if args.rows else None)
    s = summarise_sharded(rows)
    lines = ["memfit measure --sharding: N real processes (torchrun, gloo on CPU, torch 2.13.0 FSDP2 / DDP / "
             "ZeroRedundancyOptimizer), each rank's peak of live storage bytes; the measured figure is the largest "
             "rank's. AdamW's for-loop kernel (torch's default on CPU tensors). Estimate = memfit estimate's per-GPU "
             "peak. Trace = memfit trace --sharding: one rank traced in this one process on torch's fake process "
             "group (fake tensors; ZeRO-1: the larger of rank 0 and the largest partition's rank).", "",
             "| row | measured (max rank) B | ranks B | estimate B | error | trace B | trace error |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        ranks = " / ".join(f"{b:,}" for b in r.rank_bytes)
        traced = "- | -" if r.trace_bytes is None else f"{r.trace_bytes:,} | {r.trace_error:+.4%}"
        lines.append(f"| {r.label} | {r.measured_bytes:,} | {ranks} | {r.estimate_bytes:,} | {r.error:+.3%} "
                     f"| {traced} |")
    traced_max = f", trace max |error| {s['trace_max_abs_error']:.4%}" if "trace_max_abs_error" in s else ""
    lines += ["", f"{s['rows']} rows: estimate median |error| {s['median_abs_error']:.3%}, max "
              f"{s['max_abs_error']:.3%}{traced_max} ({time.perf_counter() - t0:.0f} s)"]
    print("\n".join(lines[-1:]))
    if not args.no_write:
        write_section("sharding", "\n".join(lines))


if __name__ == "__main__":
    main()
