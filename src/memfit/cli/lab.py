"""``memfit lab``: the lesson's claims measured on this machine, claim beside measurement (:mod:`memfit.lab`
computes, :mod:`memfit.report.lab` presents).

No ``from __future__ import annotations``: typer reads the ``Annotated`` options."""

import json
from pathlib import Path
from typing import Annotated

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._html import ForceOption, HtmlOption, check_html, write_html
from memfit.errors import MemfitError

ALL_REPS = "1,2,3,4,5,6,7,8"


def parse_reps(text: str) -> tuple[int, ...]:
    """``"1,4"`` -> ``(1, 4)``; each between 1 and 8."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= 8:
            raise MemfitError(f"--reps takes rep numbers 1 to 8, comma-separated (e.g. 1,4); got {part!r}")
        out.append(int(part))
    if not out:
        raise MemfitError("--reps needs at least one rep number, e.g. --reps 1,4")
    return tuple(sorted(set(out)))


@app.command("lab")
def lab_command(
    model: Annotated[str | None, typer.Argument(help="on CPU a catalogue name, run scaled (default: the lesson's "
                                                "lesson-24x2048); with --device cuda any MODEL, run as given")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu | cuda (default: cuda when available)")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="rep 3's data set (default: the bundled GSM8K, when "
                                              "../shared/ is beside the repository)")] = None,
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", "-t", help="rep 3's tokenizer")] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="rep 3: the field holding the prompt")] = None,
    completion: Annotated[str | None, typer.Option("--completion", help="rep 3: the completion field")] = None,
    text: Annotated[str | None, typer.Option("--text", help="rep 3: the field holding the whole text")] = None,
    messages: Annotated[str | None, typer.Option("--messages", help="rep 3: the field holding a chat")] = None,
    reps: Annotated[str, typer.Option("--reps", help="which reps to run, e.g. 1,4 (default: all eight)")] = ALL_REPS,
    model_out: Annotated[Path | None, typer.Option("--model-out", help="write the scaled model's config.json here "
                                                   "(the reproduce commands name it lab-model.json)")] = None,
    json_out: JsonFlag = False,
    html: HtmlOption = None,
    force: ForceOption = False,
) -> None:
    """Every checkable claim of the lesson (activations linear in batch with ~20 B per layer x token x hidden,
    checkpointing's trade, p95 lengths, sqrt(L) segments, quadratic attention scores, rank's small saving, the
    worked example, use_cache with checkpointing), measured here, each beside the claim with a verdict and the
    command that reproduces it. On CPU a scaled model keeps the whole lab to minutes."""
    from memfit.cli.measure import pick_device
    from memfit.lab import bundled_data, cpu_setup, cuda_setup, run_lab
    from memfit.report import console, err_console, print_json
    from memfit.report.lab import lab_commands, lab_table

    wanted = parse_reps(reps)
    check_html(html, force)
    if (data is None) != (tokenizer is None):
        raise MemfitError("rep 3 needs both --data FILE and --tokenizer DIR (or neither: the bundled GSM8K)")
    fields = {"prompt": prompt, "completion": completion, "text": text, "messages": messages}
    if data is None:
        found = bundled_data()
        if found is not None:
            data, tokenizer = found
            if not any(fields.values()):
                fields.update(prompt="question", completion="answer")
    dev = pick_device(device)
    if dev == "cuda":
        if model is None:
            raise MemfitError("--device cuda runs the model you name: pass a MODEL (e.g. llama-3.2-1b)")
        from memfit.estimate import resolve_config

        setup = cuda_setup(model, resolve_config(model))
    else:
        setup = cpu_setup(model or "lesson-24x2048")
    if model_out is not None:
        from memfit.files import write_atomic

        write_atomic(str(model_out), json.dumps(setup.config, indent=2) + "\n", force=force, flag="--model-out")

    def progress(line: str) -> None:
        if not json_out:
            err_console.print(f"[dim]{line}[/]", highlight=False)

    result = run_lab(setup, data=data, tokenizer=tokenizer, fields=fields, reps=wanted, progress=progress)
    d = result.to_dict()
    write_html(html, "lab", d, force)
    if json_out:
        print_json(d)
        return
    console.print(lab_table(d))
    console.print("reproduce:", highlight=False)
    for line in lab_commands(d):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
