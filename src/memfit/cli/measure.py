"""``memfit measure``: real training steps, batch/seq sweeps, the checkpointing trade, the max batch.

No ``from __future__ import annotations`` here: ``@spec_options`` rebuilds the signature and typer must
see the ``Annotated`` option objects, not strings.
"""


from typing import Annotated, Any

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._html import ForceOption, HtmlOption, SnapshotOption, check_html, check_snapshot, write_html
from memfit.cli._quiet import quiet_third_party
from memfit.cli._spec_options import ONLY_WITH, check_run_limits, explicit_flags, spec_options
from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, resolve_config
from memfit.estimate.lora import check_modules_to_save
from memfit.report import console, err_console, print_config_import, print_json

MEASURE_CHECKPOINTING = ("none", "full", "every-k", "sqrt", "both")


def parse_int_list(text: str, flag: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (positive, duplicates dropped, order kept)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise MemfitError(f"{flag} takes comma-separated positive integers like 1,2,4; got {part!r}") from None
        if value < 1:
            raise MemfitError(f"{flag} values must be positive integers; got {value}")
        if value not in out:
            out.append(value)
    if not out:
        raise MemfitError(f"{flag} needs at least one value, e.g. {flag} 1,2,4")
    return out


def pick_device(device: str | None) -> str:
    """``--device``: cuda when asked or available, else cpu; a clear error when cuda is asked but absent."""
    if device not in (None, "cpu", "cuda"):
        raise MemfitError(f"--device must be cpu or cuda; got {device!r}")
    from memfit.errors import require_extra

    require_extra("torch", "torch")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise MemfitError("--device cuda but torch sees no CUDA GPU (a CPU build of torch, or no driver): "
                          "use --device cpu")
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@app.command("measure")
@spec_options(exclude=("batch", "seq", "checkpointing", "device"))
def measure_command(
    model: Annotated[str | None, typer.Argument(help="catalogue name, config.json path or a directory with one, or a "
                                                "Hub id; or the model a --config names")] = None,
    batch: Annotated[str, typer.Option("--batch", "-b", help="micro-batch sizes, e.g. 1,2,4")] = "1,2,4",
    seq: Annotated[str, typer.Option("--seq", "-s", help="sequence lengths, e.g. 512,1024")] = "512",
    checkpointing: Annotated[str, typer.Option(
        "--checkpointing", help="none | full | every-k | sqrt | both (= none and full, with the trade)")] = "none",
    steps: Annotated[int, typer.Option("--steps", help="timed steps per point (median reported)")] = 3,
    device: Annotated[str | None, typer.Option(
        "--device", help="cpu | cuda (default: cuda when available, else cpu)")] = None,
    memory_limit: Annotated[str | None, typer.Option(
        "--memory-limit", help="a device size, e.g. 2GiB: on CPU a simulated out-of-memory above it, "
        "on CUDA torch's per-process memory fraction")] = None,
    max_batch: Annotated[bool, typer.Option(
        "--max-batch", help="also find the largest micro-batch that fits, by bisection from the estimate")] = False,
    trainer: Annotated[str | None, typer.Option(
        "--trainer", help="hf | trl: run the steps through the real transformers Trainer / TRL SFTTrainer (a tiny "
        "in-memory dataset of the requested lengths) instead of memfit's own loop")] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="write peak vs batch to this PNG")] = None,
    json_out: JsonFlag = False,
    html: HtmlOption = None,
    snapshot: SnapshotOption = None,
    force: ForceOption = False,
    gpu: Annotated[str | None, typer.Option("--gpu", hidden=True)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="show third-party warnings (bitsandbytes, "
                                          "transformers) on stderr")] = False,
    *,
    spec: RunSpec,
    config_import: Any = None,
) -> None:
    """Run real training steps (random weights, random tokens) and measure peak memory and time per step.

    Each point runs in a fresh subprocess. Peak by category (weights, gradients, optimizer, activations,
    logits, temporaries), a linear fit of peak vs batch, and with --checkpointing both the memory saved
    against the time lost. --snapshot FILE.pickle writes the highest-peak point's tracked steps as a memory
    snapshot for https://pytorch.org/memory_viz (on CUDA the allocator's own snapshot beside it, FILE.cuda.pickle).
    """
    from memfit.units import parse_size

    quiet_third_party(verbose)
    if gpu is not None:
        raise MemfitError("memfit measure runs real steps on this machine's device and judges no --gpu: pass "
                          "--memory-limit 24GiB to stop points above a device size (a simulated out-of-memory on "
                          "CPU), or ask memfit estimate / trace MODEL --gpu whether the run fits a GPU")
    if model is None:
        raise MemfitError("pass a MODEL (see `memfit models`, a config.json or a Hub id) or a --config that names one")
    if spec.sharding != "none":
        _measure_sharded(model, spec, batch=batch, seq=seq, checkpointing=checkpointing, device=device,
                         extras={"--memory-limit": memory_limit, "--max-batch": max_batch, "--trainer": trainer,
                                 "--plot": plot, "--html": html, "--snapshot": snapshot},
                         json_out=json_out, config_import=config_import)
        return
    batches = parse_int_list(batch, "--batch")
    seqs = parse_int_list(seq, "--seq")
    for values, name in ((batches, "batch"), (seqs, "seq")):  # measure's own lists: the spec's limits
        check_run_limits(spec.with_(**{name: max(values)}))
    if checkpointing not in MEASURE_CHECKPOINTING:
        raise MemfitError(f"--checkpointing must be one of {', '.join(MEASURE_CHECKPOINTING)}; got {checkpointing!r}")
    modes = ["none", "full"] if checkpointing == "both" else [checkpointing]
    if "checkpoint_every" in explicit_flags(["checkpoint_every"]) and "every-k" not in modes:
        raise MemfitError(ONLY_WITH["checkpoint_every"][1])
    if steps < 1:
        raise MemfitError(f"--steps must be a positive integer; got {steps}")
    if trainer is not None:
        from memfit.measure.trainer import TRAINERS

        if trainer not in TRAINERS:
            raise MemfitError(f"--trainer must be one of {', '.join(TRAINERS)}; got {trainer!r}")
        if memory_limit or max_batch:
            raise MemfitError("--memory-limit and --max-batch run memfit's own loop: drop them, or drop --trainer")
        if snapshot is not None:
            raise MemfitError("--snapshot records memfit's own loop: drop it, or drop --trainer")
        from memfit.measure.trainer import OPTIM

        if spec.optimizer not in OPTIM:
            raise MemfitError(f"--trainer {trainer} measures --optimizer {', '.join(OPTIM)}; got {spec.optimizer}")
        from memfit.errors import require_extra

        require_extra("trl" if trainer == "trl" else "transformers", "integrations")
        require_extra("datasets", "integrations")
    limit = parse_size(memory_limit) if memory_limit else None
    check_html(html, force)
    if plot:  # a path that cannot be written fails now, not after the sweep
        from memfit.errors import require_extra
        from memfit.report.lengths import check_plot_path

        require_extra("matplotlib", "plot")
        check_plot_path(plot, force=force)
    config = resolve_config(model)
    check_modules_to_save(ModelShape.from_hf_config(config), spec)  # before any worker builds the model
    dev = pick_device(device)
    check_snapshot(snapshot, force, cuda_beside=dev == "cuda")
    spec = spec.with_(device=dev, batch=batches[0], seq=seqs[0], checkpointing=modes[0])
    from memfit.runtime.build import check_spec

    check_spec(spec, dev)
    max_positions = config.get("max_position_embeddings") or config.get("n_positions")
    if isinstance(max_positions, int) and max(seqs) > max_positions:
        raise MemfitError(f"--seq {max(seqs)} is longer than the model's {max_positions} positions: "
                          "use a shorter --seq")

    from memfit.measure.sweep import run_sweep
    from memfit.progress import interactive, progress_bar

    total = len(batches) * len(seqs) * len(modes)
    with progress_bar("measuring", total=total, unit="points", enabled=interactive(json_out)) as bar:

        def on_point(s: RunSpec, r: object) -> None:
            if r is None:
                bar.describe(f"measuring batch {s.batch}, seq {s.seq}, checkpointing {s.checkpointing}")
            else:
                bar.advance(1)

        result = run_sweep(config, spec, model=model, batches=batches, seqs=seqs, checkpointing=modes,
                           device=dev, steps=steps, memory_limit=limit, max_batch=max_batch, on_point=on_point,
                           snapshot=snapshot, force=force, trainer=trainer)
    if snapshot is not None:
        if result.snapshot is None:
            err_console.print("no memory snapshot written: no point fits", highlight=False)
        else:
            where = str(result.snapshot.memfit) + (f" (the allocator's own: {result.snapshot.cuda})"
                                                   if result.snapshot.cuda else "")
            err_console.print(f"memory snapshot of the highest peak written to {where}: open it in "
                              "https://pytorch.org/memory_viz", highlight=False)
    if plot:
        from memfit.files import atomic_output
        from memfit.report.measure import measure_plot

        with atomic_output(plot, flag="--plot", force=force, example="plot.png") as tmp:
            measure_plot(result, str(tmp))
    write_html(html, "measure", result.to_dict(), force)
    if json_out:
        out = result.to_dict()
        if config_import is not None:
            out["config_import"] = config_import.to_json()
        print_json(out)
        return
    print_config_import(config_import)
    from memfit.report.measure import measure_report

    console.print(measure_report(result))
    if plot:
        console.print(f"plot written to {plot}")


def _measure_sharded(model: str, spec: RunSpec, *, batch: str, seq: str, checkpointing: str, device: str | None,
                     extras: dict[str, Any], json_out: bool, config_import: Any) -> None:
    """``measure --gpus N --sharding ...``: every (batch, seq, checkpointing) point in one torchrun launch of N
    processes (:mod:`memfit.measure.sharded`), each rank's peak beside the estimate's per-GPU peak."""
    given = [flag for flag, value in extras.items() if value]
    if given:
        raise MemfitError(f"{', '.join(given)} measure one process; measure --sharding {spec.sharding} reports each "
                          "rank's peak: drop them")
    if checkpointing not in MEASURE_CHECKPOINTING:
        raise MemfitError(f"--checkpointing must be one of {', '.join(MEASURE_CHECKPOINTING)}; got {checkpointing!r}")
    modes = ["none", "full"] if checkpointing == "both" else [checkpointing]
    batches, seqs = parse_int_list(batch, "--batch"), parse_int_list(seq, "--seq")
    for values, name in ((batches, "batch"), (seqs, "seq")):
        check_run_limits(spec.with_(**{name: max(values)}))
    config = resolve_config(model)
    dev = pick_device(device)
    from memfit.measure.sharded import check_measurable, measure_sharded

    specs = [spec.with_(device=dev, batch=b, seq=s, checkpointing=m) for m in modes for b in batches for s in seqs]
    for s in specs:
        check_measurable(s, dev)
    if dev == "cuda":
        import torch

        if torch.cuda.device_count() < spec.gpus:
            raise MemfitError(f"--gpus {spec.gpus} but torch sees {torch.cuda.device_count()} CUDA GPUs: lower --gpus "
                              "or use --device cpu (gloo processes)")
    from memfit.estimate import estimate_memory

    shape = ModelShape.from_hf_config(config)
    results = measure_sharded(config, specs, device=dev)
    rows = [{**r.to_dict(), "estimate_bytes": estimate_memory(shape, r.spec).peak_bytes} for r in results]
    for row in rows:
        row["estimate_error"] = (row["estimate_bytes"] - row["peak_bytes"]) / row["peak_bytes"]
    if json_out:
        out: dict[str, Any] = {"model": model, "sharded": rows}
        if config_import is not None:
            out["config_import"] = config_import.to_json()
        print_json(out)
        return
    print_config_import(config_import)
    from memfit.report.measure import sharded_table

    for row in rows:
        console.print(sharded_table(model, row))
