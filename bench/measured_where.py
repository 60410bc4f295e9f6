"""Writes the `## what is measured where` section of bench/RESULTS.md: which figures are measured on this machine's
CPU and which are CUDA assumptions or predictions (issue 14's last line). Nothing is run: the table states where
each kind of figure in the other sections comes from. Run: `.venv/bin/python bench/measured_where.py`.
"""

from __future__ import annotations

import argparse

from _results import write_section  # bench/_results.py

ROWS = [
    # (figure, where it comes from, what it rests on)
    ("peak of live tensor bytes, `## estimate` / `## agreement` / `## sharding` / `## measure` / `## lab` "
     "`measured` columns", "**CPU-measured**",
     "real training steps (torch 2.13.0+cpu, transformers 5.24.0, PEFT 0.21.2) with memfit's live-storage tracker; "
     "each storage counted once; sharding: gloo processes on CPU"),
    ("QLoRA / LLM.int8 / 8-bit AdamW rows", "**CPU-measured**, CUDA differences **assumed**",
     "bitsandbytes' CPU kernels run the step; CUDA's dequantisation temporaries and compute dtype are stated "
     "next to those figures (memfit.estimate.activations.ops)"),
    ("`--offload` rows: device bytes and host copies", "**CPU-measured**",
     "save_on_cpu on a CPU step, host copies booked apart (memfit.runtime.offload); on CUDA the unpack's device "
     "copy of each checkpoint is **assumed** (memfit.estimate.budget)"),
    ("`--offload-activations` rows (TRL's activation_offloading): device bytes and host copies", "**CPU-measured**",
     "TRL 1.16's pack rule on a CPU step (memfit.runtime.act_offload, checked against TRL's OffloadActivations); "
     "CUDA's use_streams window (up to 5 tensors kept on the device) is **not modelled**"),
    ("trace figures", "**CPU** (fake tensors)", "the real model code on FakeTensorMode with CUDA semantics modelled "
     "(memfit.trace.cuda); no GPU kernel runs"),
    ("CUDA-only kernels' bytes: sdpa flash / efficient, fused AdamW (512 B per state block), `native_dropout`'s "
     "bool mask, fp32 LayerNorm statistics, TRL's scored-token head", "**CUDA assumption**",
     "read from torch 2.13 / TRL source, not measured here: `bash bench/gpu_run.sh` checks them on a GPU"),
    ("`reserved_bytes` on CUDA (estimate, fit, trace): the caching allocator's reserved peak",
     "**CUDA prediction**", "a replay of torch 2.13's CUDACachingAllocator rules (memfit.estimate.allocator) over "
     "the estimate's synthesised allocation sequence (estimate, fit) or the traced one (trace); not measured on a "
     "GPU (bench/allocator_cuda.py in bench/gpu_run.sh compares it with torch.cuda.max_memory_reserved)"),
    ("CUDA context + cuBLAS / cuDNN workspaces, 512 MiB in every CUDA `reserved_bytes`", "**CUDA assumption**",
     "never measured here (commonly 300-600 MiB by driver and GPU); the 5% headroom covers its spread"),
    ("sharded runs' CUDA reserved figure: peak + 5% + 256 MiB + 512 MiB", "**CUDA assumption**",
     "the stated rule: the synthesised sequence is one unsharded replica's; NCCL's own buffers not modelled"),
    ("paged optimizers' states (`paged_optimizer_bytes`)", "**CUDA assumption**",
     "cudaMallocManaged unified memory outside the allocator's counters; reported apart, not measurable on CPU"),
    ("`## sharding` trace column; `## sharding at scale` (Llama-3.1-70B over 8 and 64 GPUs)", "**CPU** (fake "
     "tensors, fake process group)", "one rank traced in one process on torch's FakeStore backend; the collectives "
     "move no data; NCCL's CUDA-side buffers are **not modelled**, gloo's reduce-scatter input copy is added only "
     "for `--device cpu`"),
    ("`## deepspeed on CPU`", "**CPU-measured**", "DeepSpeed 0.19.8's own ZeRO-1/2/3 engine on 2 gloo ranks "
     "(DS_ACCELERATOR=cpu) with memfit's tracker; a comparison with memfit's torch-ZeRO estimate, not agreement "
     "rows"),
    ("`## peers` full-size rows; `## agreement` full-size configs", "**trace / published GPU figures**",
     "no CPU runs them: the reference is the trace or another framework's published GPU measurement"),
    ("timings: `## fit`, `## pack`, `## lengths`, `## scale`, `## trace`, `## estimate` ms", "**CPU-measured**",
     "wall clock on 2 shared CPU cores (load stated in each section)"),
]


def render() -> str:
    lines = ["Which figures in this file are measured on this machine's CPU, and which are CUDA assumptions or "
             "predictions (`.venv/bin/python bench/measured_where.py`). No figure here was measured on a GPU.", "",
             "| figure | source | rests on |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in ROWS]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    text = render()
    print(text)
    if not args.no_write:
        write_section("what is measured where", text)


if __name__ == "__main__":
    main()
