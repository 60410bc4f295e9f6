"""``memfit fit``: the order of remedies, with the bytes and the time each one costs."""


from typing import Annotated, Any

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._html import ForceOption, HtmlOption, check_html, write_html
from memfit.cli._spec_options import EXIT_DOES_NOT_FIT, CheckFlag, GpuFlag, HeadroomFlag, explicit_flags, spec_options
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, resolve_model
from memfit.report import console, print_config_import, print_json


@app.command("fit")
@spec_options()
def fit_command(
    model: Annotated[str | None, typer.Argument(help="catalogue name, config.json path or a directory with one, or a "
                                                "Hub id; or the model a --config names")] = None,
    gpu: GpuFlag = None,
    headroom: HeadroomFlag = None,
    data: Annotated[str | None, typer.Option("--data", help="training data (JSONL, JSON, CSV, Parquet, "
                                             "save_to_disk dir): sequence step uses its p95 and packing")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="tokenizer dir, tokenizer.json or "
                                                  "SentencePiece .model (with --data)")] = None,
    text: Annotated[str | None, typer.Option("--text", help="data field with the whole text")] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="data field with the prompt")] = None,
    completion: Annotated[str | None, typer.Option("--completion", help="data field with the completion")] = None,
    messages: Annotated[str | None, typer.Option("--messages", help="data field with chat messages")] = None,
    measurement: Annotated[str | None, typer.Option(
        "--measurement", help="JSON from memfit measure --checkpointing both --json: use its measured "
        "checkpointing slowdown instead of the 4/3 model")] = None,
    search: Annotated[bool, typer.Option("--search/--no-search", help="also search every knob combination "
                                         "for the cheapest fitting configuration")] = True,
    write: Annotated[str | None, typer.Option("--write", help="write the fitting plan into a copy of the --config "
                                              "file at this path (its own fields, each with memfit's reason)")] = None,
    json_out: JsonFlag = False,
    html: HtmlOption = None,
    force: ForceOption = False,
    check: CheckFlag = False,
    *,
    spec: RunSpec,
    config_import: Any = None,
) -> None:
    """Make a run fit: the lesson's order of remedies (checkpointing, micro-batch + accumulation, shorter
    sequence, 4-bit base, lower rank), each with the estimate after it, the bytes saved and what it costs;
    then the cheapest fitting configuration over every knob. Fits = reserved + headroom <= the GPU, the rule
    memfit estimate prints. With --gpus N > 1 peaks are per GPU and ZeRO-1/2/3 (FSDP) sharding is weighed.
    Sizes in GiB = 1024^3 bytes. Exit codes: 0 an answer, 1 bad input, 2 usage, 3 the run as given does not
    fit (with --check)."""
    from memfit.advise import DataProfile, fit, time_model_from_measurement
    from memfit.estimate.fits import Target
    from memfit.report.fit import fit_json, fit_table

    check_html(html, force)
    if gpu is None:
        raise MemfitError("memfit fit needs --gpu: a GPU name (memfit gpus) or a size such as 24GiB")
    if model is None:
        raise MemfitError("pass a MODEL (see `memfit models`, a config.json or a Hub id) or a --config that names one")
    if write is not None and config_import is None:
        raise MemfitError("--write writes into a copy of your training config: pass it with --config")
    shape = resolve_model(model)
    target = Target.resolve(gpu, headroom)
    time_model = time_model_from_measurement(measurement, shape=shape, device=spec.device) if measurement else None
    profile = None
    fields = {"--text": text, "--prompt": prompt, "--completion": completion, "--messages": messages}
    if data is None and any(v is not None for v in fields.values()):
        given = ", ".join(k for k, v in fields.items() if v is not None)
        raise MemfitError(f"{given} name fields of --data: add --data and --tokenizer, or drop them")
    if data is not None or tokenizer is not None:
        if data is None or tokenizer is None:
            raise MemfitError("--data and --tokenizer go together: the lengths need the real tokenizer")
        from memfit.data.lengths import analyse_lengths
        from memfit.progress import interactive

        report = analyse_lengths(data, tokenizer, text=text, prompt=prompt, completion=completion,
                                 messages=messages, seq_len=spec.seq, batch=spec.batch,
                                 progress=interactive(json_out))
        from memfit.data.padding import padding_report

        lengths = report.lengths

        def padding_at(batch: int, seq: int) -> tuple[float, float]:
            pad = padding_report(lengths, batch=batch, seq_len=seq)
            return pad.random.waste, pad.packed.waste

        profile = DataProfile.from_length_report(report, padding_at=padding_at)
        spec, share_source = loss_share_from_data(spec, report, data)
    elif spec.loss == "trl":
        share_source = ("--loss-token-share, as given" if explicit_flags(["loss_token_share"]) else
                        "the default: every position (pass --data with --tokenizer, or --loss-token-share)")
    else:
        share_source = None
    if json_out:
        result = fit(shape, spec, target, time_model=time_model, data=profile, search=search)
        out = fit_json(result)
        if share_source is not None:
            out["loss_token_share"] = {"value": spec.loss_token_share, "source": share_source}
        if config_import is not None:
            out["config_import"] = config_import.to_json()
        if write is not None:
            out["written"] = _write(result, config_import, write, force).to_dict()
        write_html(html, "fit", out, force)
        print_json(out)
        if check and not result.fits_initially:
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        return
    print_config_import(config_import)
    if share_source is not None:
        console.print(f"loss-token share {spec.loss_token_share:.3f} (TRL's fused head): {share_source}",
                      highlight=False)
    from memfit.progress import progress_bar

    with progress_bar("searching configurations", unit="configurations") as bar:
        result = fit(shape, spec, target, time_model=time_model, data=profile, search=search, progress=bar.update)
    write_html(html, "fit", fit_json(result), force)
    console.print(fit_table(result))
    if write is not None:
        from memfit.report.configs import written_lines

        for line in written_lines(_write(result, config_import, write, force)):
            console.print(line, highlight=False)
    if check and not result.fits_initially:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def loss_share_from_data(spec: RunSpec, report: Any, data: str) -> tuple[RunSpec, str | None]:
    """``--loss trl``: the run's ``loss_token_share`` from the data's labels (:meth:`LengthReport.loss_token_share
    <memfit.data.lengths.LengthReport.loss_token_share>`, the worst example at --seq), unless --loss-token-share
    was typed; and where the share came from, in words (None when the loss is not TRL's)."""
    if spec.loss != "trl":
        return spec, None
    if explicit_flags(["loss_token_share"]):
        return spec, "--loss-token-share, as given (the data's was not used)"
    share = report.loss_token_share()
    if share is None:
        return spec, f"{data} is plain text: every token carries loss (share 1)"
    return spec.with_(loss_token_share=share), (
        f"{data}: the most loss-carrying positions of one example within --seq {spec.seq}, "
        f"{report.loss_positions_max:,} of {spec.seq - 1:,} (labels != -100 after the causal shift)")


def _write(result: Any, config_import: Any, path: str, force: bool) -> Any:
    """``--write``: the ordered plan's changes into a copy of the user's training config."""
    from memfit.advise import setup_changes
    from memfit.configs import write_fixed
    from memfit.units import BYTES_PER_GIB

    if not result.fits:
        raise MemfitError(f"the plan does not fit on {result.gpu.name}: nothing written to {path}")
    files = [f for f in config_import.imported.files if f.referenced_by is None]
    trainers = [f for f in files if f.kind in ("axolotl", "llamafactory", "trl", "hf-trainer", "torchtune")]
    source = (trainers or files)[0]
    # the planned run against what the file says: the plan's steps and the flags given on the command line
    written, final = config_import.file_spec.to_dict(), result.final.spec.to_dict()
    changes = {k: (written[k], v) for k, v in final.items() if v != written[k]}
    plan = setup_changes(result.initial, result.final)
    changes.update({k: tuple(plan[k]) for k in ("packing",) if k in plan})
    settings = config_import.imported.settings
    if settings.get("seq_unbounded") and "seq" not in settings:  # max_seq_len null: write the length planned for
        changes["seq"] = (None, final["seq"])
    reasons = {k: f"{k} {old} -> {new}, set on the command line" for k, (old, new) in changes.items()}
    previous = result.initial
    for i, step in enumerate(result.steps, 1):
        for name, (old, new) in setup_changes(previous, step.setup).items():
            reasons[name] = (f"{name} {old} -> {new}, fit step {i} ({step.action}): peak "
                             f"{step.peak_bytes / BYTES_PER_GIB:.2f} GiB on {result.gpu.name}")
        previous = step.setup
    after = {**result.final.spec.to_dict(), "packing": result.final.packing}
    return write_fixed(source.path, source.kind, changes, reasons, after, config_import.imported, path, force=force)
