"""``memfit fit``: the order of remedies, with the bytes and the time each one costs."""


from typing import Annotated

import typer

from memfit.cli._app import app
from memfit.cli._spec_options import EXIT_DOES_NOT_FIT, CheckFlag, HeadroomFlag, spec_options
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, resolve_model
from memfit.report import console, print_json

JsonFlag = Annotated[bool, typer.Option("--json", help="machine-readable output")]


@app.command("fit")
@spec_options()
def fit_command(
    model: Annotated[str, typer.Argument(help="catalogue name, config.json path, or a directory with one")],
    gpus: Annotated[int, typer.Option("--gpus", help="data-parallel GPUs: allows ZeRO-1/2/3 (FSDP) sharding; "
                                      "peaks are then per GPU")] = 1,
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
    json_out: JsonFlag = False,
    check: CheckFlag = False,
    *,
    spec: RunSpec,
) -> None:
    """Make a run fit: the lesson's order of remedies (checkpointing, micro-batch + accumulation, shorter
    sequence, 4-bit base, lower rank), each with the estimate after it, the bytes saved and what it costs;
    then the cheapest fitting configuration over every knob. Fits = reserved + headroom <= the GPU, the rule
    memfit estimate prints. Sizes in GiB = 1024^3 bytes. Exit codes: 0 an answer, 1 bad input, 2 usage,
    3 the run as given does not fit (with --check)."""
    from memfit.advise import DataProfile, Headroom, fit, time_model_from_measurement
    from memfit.report.fit import fit_json, fit_table

    if spec.gpu is None:
        raise MemfitError("memfit fit needs --gpu: a GPU name (memfit gpus) or a size such as 24GiB")
    shape = resolve_model(model)
    room = Headroom.parse(headroom)
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

        report = analyse_lengths(data, tokenizer, text=text, prompt=prompt, completion=completion,
                                 messages=messages, seq_len=spec.seq, batch=spec.batch, progress=not json_out)
        from memfit.data.padding import padding_report

        lengths = report.lengths

        def padding_at(batch: int, seq: int) -> tuple[float, float]:
            pad = padding_report(lengths, batch=batch, seq_len=seq)
            return pad.random.waste, pad.packed.waste

        profile = DataProfile.from_length_report(report, padding_at=padding_at)
    if json_out:
        result = fit(shape, spec, gpus=gpus, headroom=room, time_model=time_model, data=profile, search=search)
        print_json(fit_json(result))
        if check and not result.fits_initially:
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        return
    from rich.progress import Progress

    with Progress(transient=True, console=console) as bar:
        task = bar.add_task("searching configurations", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = fit(shape, spec, gpus=gpus, headroom=room, time_model=time_model, data=profile, search=search,
                     progress=progress)
    console.print(fit_table(result))
    if check and not result.fits_initially:
        raise typer.Exit(EXIT_DOES_NOT_FIT)
