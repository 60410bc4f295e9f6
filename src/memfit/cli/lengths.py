"""``memfit lengths``: the token-length distribution of a data set with the real tokenizer.

No ``from __future__ import annotations`` here: ``@spec_options`` rebuilds the signature and typer must
see real ``Annotated`` objects, not strings.
"""


from pathlib import Path
from typing import Annotated

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._data_options import EosOpt, NoEosOpt, eos_choice
from memfit.cli._html import ForceOption, HtmlOption, check_html, write_html
from memfit.cli._spec_options import SPEC_OPTIONS, explicit_flags, spec_options
from memfit.errors import MemfitError
from memfit.estimate import RunSpec


@app.command("lengths")
@spec_options(exclude=("batch", "seq"))
def lengths_command(
    data: Annotated[str, typer.Argument(help="JSONL (.jsonl.gz), JSON, CSV, Parquet, or a save_to_disk directory")],
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t", help="tokenizer directory, tokenizer.json, "
                                           "or SentencePiece .model (offline)")],
    text: Annotated[str | None, typer.Option("--text", help="field holding the whole text")] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="field holding the prompt (no loss)")] = None,
    completion: Annotated[str | None, typer.Option("--completion", help="field holding the completion")] = None,
    messages: Annotated[str | None, typer.Option("--messages", help="field holding a chat (OpenAI role/content "
                                                 "or ShareGPT from/value), rendered with the chat template")] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", help="training sequence length (truncation, "
                                         "packing rows)")] = 2048,
    batch: Annotated[int, typer.Option("--batch", "-b", help="micro-batch size for padding waste")] = 8,
    model: Annotated[str | None, typer.Option("--model", "-m", help="catalogue name or config.json: also show "
                                              "the activation memory of each batching strategy")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write a histogram (PNG) with p95 and max marked")] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the random batch order (>= 0)")] = 0,
    eos: EosOpt = None,
    no_eos: NoEosOpt = False,
    json_out: JsonFlag = False,
    html: HtmlOption = None,
    force: ForceOption = False,
    gpu: Annotated[str | None, typer.Option("--gpu", hidden=True)] = None,
    *,
    spec: RunSpec,
) -> None:
    """Token lengths of DATA: percentiles, the sequence length to train at (p95), truncation, loss tokens,
    padding waste of random / length-grouped / packed batches, and with --model the activation memory."""
    from memfit.data.lengths import analyse_lengths, strategy_activations
    from memfit.progress import interactive
    from memfit.report import console, print_json
    from memfit.report.lengths import check_plot_path, lengths_renderable, plot_lengths

    if gpu is not None:
        raise MemfitError("memfit lengths measures the data and judges no GPU: ask memfit fit MODEL --gpu 24GiB "
                          "--data DATA --tokenizer T whether (and how) the run fits")
    if model is None:
        given = sorted(explicit_flags([n for n in SPEC_OPTIONS if n not in ("batch", "seq")]))
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            one = len(given) == 1
            raise MemfitError(f"{flags} describe{'s' if one else ''} the run whose activation memory --model "
                              f"shows: add --model, or drop {'it' if one else 'them'}")
    if plot is not None:  # fail on a path that cannot be written before the slow part
        check_plot_path(plot, force=force)
    check_html(html, force)
    shape = None
    if model is not None:  # fail on a bad model name before the slow part
        from memfit.estimate import resolve_model

        shape = resolve_model(model)
    report = analyse_lengths(data, tokenizer, text=text, prompt=prompt, completion=completion, messages=messages,
                             seq_len=seq_len, batch=batch, seed=seed, progress=interactive(json_out),
                             eos=eos_choice(eos, no_eos))
    if shape is not None:
        from dataclasses import replace

        report = replace(report, activations=strategy_activations(report, shape, spec), model=shape.name)
    if plot is not None:
        plot_lengths(report, plot, force=force)
    if json_out or html is not None:
        from memfit.data.histogram import length_histogram

        # the histogram rides in the JSON so that `memfit report` can draw the distribution without the lengths
        result = {**report.to_dict(), "histogram": length_histogram(report.lengths).to_dict()}
        write_html(html, "lengths", result, force)
        if json_out:
            print_json(result)
            return
    console.print(lengths_renderable(report))
    if plot is not None:
        console.print(f"histogram written to {plot}")
