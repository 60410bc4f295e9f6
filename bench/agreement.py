"""Agreement: estimate, trace and measure on one matrix (:mod:`memfit.validate.agreement`). Writes the
``## agreement`` section.

    OMP_NUM_THREADS=2 .venv/bin/python bench/agreement.py            # the full CPU matrix + full-size rows
    .venv/bin/python bench/agreement.py --fast --no-write              # the 8-row subset that `make test` runs

Every row is a real architecture scaled down (few layers, narrower, real ratios and real vocabulary) so
a CPU step takes seconds; "measured" is the peak of live tensor bytes over two real training steps
(memfit.measure, CPU live-tensor tracker). Full-size configs (8B, 70B) cannot run here: there the
trace (the real model code on fake tensors) stands in for the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_section  # noqa: E402
from memfit.estimate import RunSpec, estimate_memory, lookup  # noqa: E402
from memfit.estimate.constants import RULE_OF_THUMB_BYTES  # noqa: E402
from memfit.units import BYTES_PER_GIB, BYTES_PER_MIB  # noqa: E402
from memfit.validate.agreement import (  # noqa: E402
    AgreementRow,
    MatrixRow,
    cuda_matrix,
    fast_matrix,
    full_matrix,
    measure_row,
    peft_layer_matrix,
    quant_matrix,
    run_row,
    summarise,
)
from memfit.validate.rows_act_offload import act_offload_matrix  # noqa: E402
from memfit.validate.rows_checkpointing import checkpointing_matrix  # noqa: E402

FULL_SIZE = (
    ("llama-3.1-8b", RunSpec(method="lora", precision="bf16", batch=1, seq=2048, device="cuda")),
    ("llama-3.1-8b", RunSpec(method="lora", precision="bf16", batch=1, seq=2048, device="cuda",
                             checkpointing="full")),
    ("qwen2.5-7b", RunSpec(method="lora", precision="bf16", batch=2, seq=1024, device="cuda",
                           targets=("all-linear",))),
    ("llama-3.1-70b", RunSpec(method="lora", precision="bf16", batch=1, seq=2048, device="cuda",
                              checkpointing="full")),
)


def activation_constants(rows: list[MatrixRow]) -> list[tuple[str, str, float]]:
    """Measured bytes per layer x token x hidden: the forward peak of 4 layers minus that of 2 layers.

    Everything outside the decoder blocks (embeddings, logits, loss) and the per-layer model states
    cancel or are subtracted exactly (states from parameter counts), leaving two blocks' activations.
    """
    from memfit.measure.point import measure_point

    out = []
    seen = set()
    for row in rows:
        key = (row.model, row.spec.precision, row.spec.method)
        # one fp32 LoRA row per architecture, and bf16 for two of them (bf16 steps are slow on this CPU)
        wanted = (row.spec.precision == "fp32" and row.spec.method == "lora") or (
            row.spec.precision == "bf16" and row.model in ("llama-3.2-1b", "qwen2.5-0.5b"))
        if key in seen or row.spec.checkpointing != "none" or not wanted:
            continue
        seen.add(key)
        peaks, states = [], []
        for layers in (2, 4):
            cfg = dict(row.config)
            for k in ("num_hidden_layers", "n_layer"):
                if k in cfg:
                    cfg[k] = layers
            if isinstance(cfg.get("layer_types"), list):  # one entry per layer: repeat the 2-layer pattern
                cfg["layer_types"] = [cfg["layer_types"][i % len(cfg["layer_types"])] for i in range(layers)]
            p = measure_point(cfg, row.spec, steps=1, warmup=0)
            peaks.append(p.phase_peaks.get("forward", p.peak_bytes or 0))
            from memfit.estimate import ModelShape

            states.append(estimate_memory(ModelShape.from_hf_config(cfg), row.spec).model_states)
        d_states = (states[1].weights_frozen + states[1].weights_trainable + states[1].optimizer) - (
            states[0].weights_frozen + states[0].weights_trainable + states[0].optimizer)
        shape = row.shape
        const = (peaks[1] - peaks[0] - d_states) / (2 * row.spec.batch * row.spec.seq * shape.hidden)
        out.append((row.label, shape.model_type, const))
    return out


def _error_cells(r: AgreementRow) -> str:
    """The estimate, trace, rule-of-thumb and states-only errors of one row, as table cells."""
    tr = f"{r.trace_error:+.2%}" if r.trace_error is not None else "n/a"
    return (f"{r.estimate_error:+.2%} | {tr} | {r.error(r.rule_of_thumb_bytes):+.1%} | "
            f"{r.error(r.states_only_bytes):+.1%}")


def _failed_rows(failed: list[tuple[str, str]] | None) -> list[str]:
    return [f"| {label} | did not run: {err} | | | | | |" for label, err in failed or []]


def render(results: list[AgreementRow], consts: list[tuple[str, str, float]],
           full: list[tuple[str, RunSpec, int, int, float]], seconds: float,
           failed: list[tuple[str, str]] | None = None) -> str:
    s = summarise(results)
    lines = [
        "Estimate and trace against measured peaks (CPU, real training steps of scaled-down real architectures: "
        "2 layers, real head/kv/intermediate ratios, real vocabularies). Error = (engine - measured) / measured. "
        "Sizes in MiB = 1024^2 B. Regenerate: `OMP_NUM_THREADS=2 .venv/bin/python bench/agreement.py`.",
        "",
        f"**Summary** over {s.rows} rows, {s.architectures} architectures: estimate |error| median "
        f"{s.estimate_median_abs:.2%}, max {s.estimate_max_abs:.2%} (target <= 2% / 5%); trace |error| median "
        f"{(s.trace_median_abs or 0):.2%}, max {(s.trace_max_abs or 0):.2%} (target max <= 1%); the lesson's rule of "
        f"thumb (model states + L*b*s*h*{RULE_OF_THUMB_BYTES}) median {s.rule_of_thumb_median_abs:.1%}; "
        f"weights+gradients+optimizer only median {s.states_only_median_abs:.1%}. Matrix time {seconds:.0f} s.",
        "",
        "| row | measured MiB | phase | estimate | trace | rule of thumb | states only |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r.row.label} | {r.measured_bytes / BYTES_PER_MIB:,.1f} | {r.measured_phase} | "
                     f"{_error_cells(r)} |")
    lines += _failed_rows(failed)
    if consts:
        lines += ["", "**Measured activation constant** (bytes per layer x token x hidden, from the forward peak "
                  "at 4 layers minus 2 layers; the lesson says ~20 for bf16; the fp32 eager rows also hold the b*a*s*s "
                  "attention scores and 4-byte elements, and Mixtral with all-linear LoRA holds PEFT's effective "
                  "expert weights W + BA per layer, which scale with layers, not tokens):", "",
                  "| row | architecture | bytes / (L*b*s*h) |", "|---|---|---:|"]
        by_arch: dict[str, list[float]] = defaultdict(list)
        for label, arch, c in consts:
            lines.append(f"| {label} | {arch} | {c:.1f} |")
            by_arch[arch].append(c)
    if full:
        lines += ["", "**Full-size configs** (cannot run here: the trace stands in for the measurement, CUDA "
                  "prediction):", "", "| model | spec | trace GiB | estimate GiB | estimate vs trace | trace s |",
                  "|---|---|---:|---:|---:|---:|"]
        for name, spec, tr, est, secs in full:
            label = f"{spec.method} {spec.precision} b{spec.batch} s{spec.seq} ckpt={spec.checkpointing}"
            lines.append(f"| {name} | {label} | {tr / BYTES_PER_GIB:.2f} | {est / BYTES_PER_GIB:.2f} | "
                         f"{(est - tr) / tr:+.2%} | {secs:.0f} |")
    return "\n".join(lines) + "\n"


def cuda_measure(out_path: str) -> int:
    """Measure every CUDA row in this process (one at a time, memory released between rows)."""
    import torch

    points = []
    for row in cuda_matrix():
        t = time.perf_counter()
        try:
            p = measure_row(row).to_dict()
        except Exception as exc:  # a row that cannot run here is reported, the others go on
            p = {"fits": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        p["label"], p["seconds"] = row.label, time.perf_counter() - t
        points.append(p)
        print(f"{row.label:70s} peak {p.get('peak_bytes')} reserved {p.get('reserved_bytes')} "
              f"{p.get('error') or ''} ({p['seconds']:.0f} s)", flush=True)
        torch.cuda.empty_cache()
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    import transformers

    env["transformers"] = transformers.__version__
    Path(out_path).write_text(json.dumps({"env": env, "points": points}, indent=1))
    return 0


def cuda_results(path: str, *, write: bool) -> int:
    """Estimate and trace each CUDA row beside what the GPU measured."""
    from memfit.measure.result import PointResult

    data = json.loads(Path(path).read_text())
    by_label = {p["label"]: p for p in data["points"]}
    results, failed = [], []
    for row in cuda_matrix():
        p = by_label.get(row.label)
        if not p or not p.get("fits"):
            failed.append((row.label, (p or {}).get("error", "not measured")))
            continue
        point = PointResult.from_dict({k: v for k, v in p.items() if k not in ("label", "seconds")})
        r = run_row(row, measured=point)
        results.append((r, point))
        print(f"{row.label:70s} measured {r.measured_bytes:>14,} est {r.estimate_error:+.2%} "
              f"trace {r.trace_error:+.2%}", flush=True)
    s = summarise([r for r, _ in results])
    env = data["env"]
    lines = [
        f"Full-size catalogue models measured on a real GPU ({env['device']}, torch {env['torch']}, transformers "
        f"{env['transformers']}): `torch.cuda.max_memory_allocated` over two training steps (the first allocates "
        "the optimizer state), against memfit's CUDA estimate and trace (run here, on this CPU). "
        "Regenerate: `bash bench/gpu_run.sh` on the GPU machine, then "
        "`.venv/bin/python bench/agreement.py --cuda-results agreement_cuda.json`.",
        "",
        f"**Summary** over {s.rows} rows: estimate |error| median {s.estimate_median_abs:.2%}, max "
        f"{s.estimate_max_abs:.2%}; trace |error| median {(s.trace_median_abs or 0):.2%}, max "
        f"{(s.trace_max_abs or 0):.2%}; rule of thumb median {s.rule_of_thumb_median_abs:.1%}; weights+gradients+"
        f"optimizer only median {s.states_only_median_abs:.1%}.",
        "",
        "| row | measured GiB | reserved GiB | estimate | trace | rule of thumb | states only |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r, point in results:
        reserved = f"{point.reserved_bytes / BYTES_PER_GIB:.2f}" if point.reserved_bytes else "-"
        lines.append(f"| {r.row.label} | {r.measured_bytes / BYTES_PER_GIB:.2f} | {reserved} | {_error_cells(r)} |")
    lines += _failed_rows(failed)
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        write_section("agreement on CUDA", text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true", help="only the 8-row subset")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-full-size", action="store_true")
    ap.add_argument("--models", help="only these catalogue models (comma-separated), e.g. mixtral-8x7b")
    ap.add_argument("--checkpointing-rows", action="store_true",
                    help="only the sqrt / every-k rows (memfit.validate.rows_checkpointing); prints, writes nothing")
    ap.add_argument("--act-offload-rows", action="store_true",
                    help="only the --offload-activations rows (TRL's activation_offloading; rows_act_offload.py)")
    ap.add_argument("--quant", action="store_true", help="only the bitsandbytes / AdamW-kernel rows (issue 14, "
                    "memfit.validate.rows_quant); prints, never writes")
    ap.add_argument("--moe-peft", action="store_true", help="only the --bias / --layers-to-transform rows on MoE "
                    "models (issue 14 part 3, memfit.validate.rows_moe_peft); prints, never writes")
    ap.add_argument("--peft-rows", nargs="?", const="all", choices=("all", "layers", "bias", "tokens"),
                    help="only the PEFT per-layer option rows (memfit.validate.rows_peft), or one kind of them; "
                    "prints, never writes")
    ap.add_argument("--cuda-measure", metavar="OUT_JSON",
                    help="on a GPU machine: measure the CUDA matrix (full-size models) and write the points")
    ap.add_argument("--cuda-results", metavar="JSON",
                    help="estimate and trace the CUDA matrix against points measured on a GPU machine")
    args = ap.parse_args()
    if args.cuda_measure:
        return cuda_measure(args.cuda_measure)
    if args.cuda_results:
        return cuda_results(args.cuda_results, write=not args.no_write)
    rows = fast_matrix() if args.fast else (quant_matrix() if args.quant else full_matrix() + checkpointing_matrix()
                                                                + act_offload_matrix())
    if args.checkpointing_rows:
        rows, args.no_write, args.no_full_size = checkpointing_matrix(), True, True
    if args.quant:
        args.no_write = args.no_full_size = True
    if args.moe_peft:
        from memfit.validate.rows_moe_peft import MOE_PEFT_ROWS

        rows, args.no_write, args.no_full_size = peft_layer_matrix(MOE_PEFT_ROWS), True, True
    if args.peft_rows:
        from memfit.validate import rows_peft

        kinds = {"layers": rows_peft.LAYER_ROWS, "bias": rows_peft.BIAS_ROWS, "tokens": rows_peft.TOKEN_ROWS}
        rows = peft_layer_matrix(None if args.peft_rows == "all" else kinds[args.peft_rows])
        args.no_write = args.no_full_size = True
    if args.act_offload_rows:
        rows, args.no_write, args.no_full_size = act_offload_matrix(), True, True
    if args.models:
        keep = {m.strip() for m in args.models.split(",")}
        rows = [r for r in rows if r.model in keep]
    t0 = time.perf_counter()
    results, failed = [], []
    for row in rows:
        try:
            r = run_row(row)
        except Exception as exc:  # report the row, go on with the matrix
            failed.append((row.label, f"{type(exc).__name__}: {str(exc)[:160]}"))
            print(f"{row.label:70s} did not run: {failed[-1][1]}", flush=True)
            continue
        results.append(r)
        tr = f"{r.trace_error:+.2%}" if r.trace_error is not None else "n/a"
        print(f"{row.label:70s} measured {r.measured_bytes:>13,} est {r.estimate_error:+.2%} trace {tr} "
              f"({r.seconds:.0f} s)", flush=True)
    seconds = time.perf_counter() - t0
    narrow = (args.fast or args.models or args.checkpointing_rows or args.quant or args.moe_peft or args.peft_rows
              or args.act_offload_rows)
    consts = [] if narrow else activation_constants(rows)
    full = []
    if not (args.fast or args.no_full_size):
        from memfit.trace.engine import trace_step

        for name, spec in FULL_SIZE:
            t = time.perf_counter()
            tr = trace_step(dict(lookup(name).config), spec, name=name).peak_bytes
            est = estimate_memory(lookup(name).shape, spec).peak_bytes
            full.append((name, spec, tr, est, time.perf_counter() - t))
            print(f"{name} {spec.checkpointing}: trace {tr:,} estimate {est:,} ({(est - tr) / tr:+.2%})", flush=True)
    text = render(results, consts, full, seconds, failed)
    print(text)
    if not args.no_write:
        write_section("agreement", text)
    s = summarise(results)
    print(f"median |est| {s.estimate_median_abs:.2%} max {s.estimate_max_abs:.2%}; trace max {s.trace_max_abs}")
    return 0 if statistics.median([abs(r.estimate_error) for r in results]) <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
