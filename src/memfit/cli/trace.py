"""``memfit trace``: one training step of the real model on fake tensors, exact accounting, no memory.

No ``from __future__ import annotations`` here: ``@spec_options`` rebuilds the signature and typer must
see the ``Annotated`` option objects, not strings.
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._html import ForceOption, HtmlOption, SnapshotOption, check_html, check_snapshot, write_html
from memfit.cli._quiet import quiet_third_party
from memfit.cli._spec_options import (
    EXIT_DOES_NOT_FIT,
    CheckFlag,
    GpuFlag,
    HeadroomFlag,
    spec_options,
    target_from_options,
)
from memfit.errors import MemfitError, require_extra
from memfit.estimate import RunSpec, read_config_file, resolve_config, validate_config
from memfit.report import console, err_console, print_config_import, print_json

TRACE_PHASES = 3  # trace_step says: building the model, creating the optimizer state, tracing one step


@app.command("trace")
@spec_options()
def trace_command(
    model: Annotated[str | None, typer.Argument(help="catalogue name, config.json path or a directory with one, or a "
                                                "Hub id; or the model a --config names")] = None,
    json_out: JsonFlag = False,
    top: Annotated[int, typer.Option("--top", help="rows of the per-module table (0: fold them all)")] = 15,
    gpu: GpuFlag = None,
    headroom: HeadroomFlag = None,
    check: CheckFlag = False,
    html: HtmlOption = None,
    snapshot: SnapshotOption = None,
    force: ForceOption = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="show third-party warnings (bitsandbytes, "
                                          "transformers) on stderr")] = False,
    *,
    spec: RunSpec,
    config_import: Any = None,
) -> None:
    """Run one training step of MODEL's real transformers/PEFT code on fake tensors: the exact peak and who
    holds it, for any size, with no GPU. --device cuda (default) predicts a CUDA step, --device cpu a CPU one.
    With --gpu, whether it fits by the rule memfit estimate prints. --snapshot FILE.pickle writes the traced
    step as a memory snapshot for https://pytorch.org/memory_viz. --sharding ddp|zero1|zero2|zero3|fsdp|hsdp
    --gpus N [--nodes M] (full fine-tune): one rank of the N-GPU job on a fake process group, every figure that
    GPU's. Exit codes: 0 an answer, 1 bad input, 2 usage, 3 does not fit (with --check)."""
    quiet_third_party(verbose)
    from dataclasses import replace

    if top < 0:
        raise MemfitError(f"--top {top}: the per-module table takes 0 rows or more (0 folds them all into one)")
    target = target_from_options(gpu, headroom, check=check)  # a bad --gpu or --headroom fails before the trace
    require_extra("torch", "torch")
    require_extra("transformers", "torch")
    from memfit.report.trace import module_table, saved_table, trace_json, trace_table, verdict
    from memfit.trace.engine import check_trace_config, check_trace_spec, trace_step
    from memfit.trace.sharded import check_sharded_trace

    if model is None:
        raise MemfitError("pass a MODEL (see `memfit models`, a config.json or a Hub id) or a --config that names one")
    check_trace_spec(spec)
    check_sharded_trace(spec)
    check_html(html, force)
    check_snapshot(snapshot, force)
    config = load_config(model)
    check_trace_config(config, spec)
    estimate = _estimate(model, spec, target)
    from memfit.progress import interactive, progress_bar

    # trace reports its phases by name (trace_step's progress callback): the bar counts them; no phase reports
    # its size, so the bar gives the phase and the time so far, and the time left only as phases complete
    with progress_bar("tracing", total=TRACE_PHASES, unit="phases", enabled=interactive(json_out)) as bar:
        seen: list[str] = []

        def on_phase(message: str) -> None:
            seen.append(message)
            bar.describe(message)
            bar.update((len(seen) - 1) % TRACE_PHASES, TRACE_PHASES)  # ZeRO-1 may trace a second rank: again

        result = trace_step(config, spec, name=model, snapshot=snapshot is not None, progress=on_phase)
    result = replace(result, target=target)
    if snapshot is not None and result.snapshot is not None:
        from memfit.runtime.snapshot import write_snapshot

        written = write_snapshot(snapshot, result.snapshot, force=force)
        err_console.print(f"memory snapshot written to {written}: open it in https://pytorch.org/memory_viz",
                          highlight=False)
    write_html(html, "trace", trace_json(result, estimate), force)
    if json_out:
        out = trace_json(result, estimate)
        if config_import is not None:
            out["config_import"] = config_import.to_json()
        print_json(out)
        if check and result.fits is False:
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        return
    print_config_import(config_import)
    console.print(trace_table(result, estimate))
    console.print(module_table(result, top=top))
    console.print(saved_table(result))
    line = verdict(result)
    if line:
        console.print(line)
    if result.host_bytes:
        what = "--offload-activations saved tensors" if result.spec.offload_activations else "--offload checkpoints"
        console.print(f"host memory ({what}, not in the peak): {result.host_bytes:,} B "
                      f"({result.host_bytes / 1024**3:.3f} GiB)", highlight=False)
    if result.allocator is not None and result.allocator.get("message"):
        console.print(str(result.allocator["message"]), highlight=False)
    console.print(f"traced in {result.build_seconds + result.step_seconds:.1f} s "
                  f"(build {result.build_seconds:.1f} s, step {result.step_seconds:.1f} s)", style="dim")
    if check and result.fits is False:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def load_config(model: str) -> dict[str, Any]:
    """A catalogue entry's config, or any ``config.json`` transformers can build (also architectures the
    estimate does not model: trace runs the real code, so it needs no shape model). Never remote code.
    Read and checked by the estimate's boundary (:func:`memfit.estimate.read_config_file`,
    :func:`memfit.estimate.validate_config`), so a bad config fails here, before any model is built."""
    p = Path(model)
    if not (p.is_dir() or p.suffix == ".json" or p.exists()):
        return resolve_config(model)
    config, file = read_config_file(p)
    if not config.get("model_type"):
        raise MemfitError(f"{file} has no model_type: add one (e.g. \"llama\") to the config")
    validate_config(config)
    return config


def _estimate(model: str, spec: RunSpec, target: Any = None) -> Any:
    """The analytic estimate for the same spec, shown beside the trace (None if it cannot be made)."""
    try:
        from memfit.estimate import estimate_memory, resolve_model
        from memfit.report.estimate import estimate_json

        return estimate_json(estimate_memory(resolve_model(model), spec), target)
    except Exception:  # the trace stands on its own; the estimate column is a comparison
        return None
