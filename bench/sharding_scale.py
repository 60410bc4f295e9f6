"""Sharded training at scale traced on this machine: one rank of an N-GPU job on a fake process group, fake
tensors and meta-initialised weights (no memory behind them), beside ``memfit estimate`` of the same spec.
Writes ``## sharding at scale`` of RESULTS.md.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sharding_scale.py [--only 70b-fsdp8] [--no-write]
"""

from __future__ import annotations

import argparse
import time

from _results import write_section
from memfit.estimate import estimate_memory, resolve_config, resolve_model
from memfit.estimate.spec import RunSpec
from memfit.trace.engine import trace_step

GIB = 1024**3
POINTS: dict[str, tuple[str, RunSpec]] = {
    # a full fine-tune as a user runs it on 8 x 80 GB: bf16 weights and AdamW (fused, the Trainer's
    # adamw_torch_fused), one 4,096-token sequence per GPU, every decoder layer checkpointed, FSDP2 FULL_SHARD
    "70b-fsdp8": ("llama-3.1-70b", RunSpec(method="full", precision="bf16", batch=1, seq=4096, checkpointing="full",
                                           device="cuda", sharding="fsdp", gpus=8)),
    "70b-hsdp2x8": ("llama-3.1-70b", RunSpec(method="full", precision="bf16", batch=1, seq=4096,
                                             checkpointing="full", device="cuda", sharding="hsdp", gpus=16, nodes=2)),
    "70b-fsdp64": ("llama-3.1-70b", RunSpec(method="full", precision="bf16", batch=1, seq=4096,
                                            checkpointing="full", device="cuda", sharding="fsdp", gpus=64, nodes=8)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default=None, help=f"only these points (comma-separated): {', '.join(POINTS)}")
    ap.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(POINTS)
    lines = ["`memfit trace --sharding`: one rank of the job traced in one process (torch 2.13.0's fake process group, "
             "FSDP2 `fully_shard` per decoder layer then the root on meta weights materialised as fake tensors, "
             "transformers 5.24's Llama code, --device cuda corrections), beside `memfit estimate` of the same spec. "
             "Per-GPU bytes; GiB = 1024^3 B. Wall time on this machine (2 shared cores; the whole trace holds "
             "~0.4 GB of host memory: no weight has storage). hsdp 2x8 shards within a node of 8, so its rank "
             "holds what fsdp x8's does.", "",
             "| run | trace peak B (GiB) | phase | estimate peak B (GiB) | trace / estimate | trace wall s |",
             "|---|---:|---|---:|---:|---:|"]
    for key in names:
        model, spec = POINTS[key]
        est = estimate_memory(resolve_model(model), spec)
        t0 = time.perf_counter()
        r = trace_step(resolve_config(model), spec, name=model)
        wall = time.perf_counter() - t0
        nodes = f", {spec.nodes} nodes" if spec.nodes > 1 else ""
        label = (f"{model} full {spec.precision} b{spec.batch} s{spec.seq} ckpt {spec.checkpointing}, {spec.sharding} "
                 f"x{spec.gpus}{nodes}, rank {r.rank}")
        line = (f"| {label} | {r.peak_bytes:,} ({r.peak_bytes / GIB:.2f}) | {r.peak_phase} | {est.peak_bytes:,} "
                f"({est.peak_bytes / GIB:.2f}) | {r.peak_bytes / est.peak_bytes:.4f} | {wall:.0f} |")
        print(line, flush=True)
        print("  trace components:", {str(k): v for k, v in r.components.items()}, flush=True)
        print("  estimate components:", {str(k): v for k, v in est.components.items()}, flush=True)
        lines.append(line)
    if not args.no_write:
        write_section("sharding at scale", "\n".join(lines))


if __name__ == "__main__":
    main()
