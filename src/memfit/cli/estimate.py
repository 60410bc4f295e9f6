"""``memfit estimate`` and ``memfit gpus``: the analytic budget of one training step, and the GPU table."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._html import ForceOption, HtmlOption, check_html, write_html
from memfit.cli._spec_options import (
    EXIT_DOES_NOT_FIT,
    SPEC_OPTIONS,
    CheckFlag,
    GpuFlag,
    HeadroomFlag,
    explicit_flags,
    spec_options,
    target_from_options,
)
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, estimate_memory, resolve_model, rule_of_thumb_activation_bytes
from memfit.report import console, print_config_import, print_json
from memfit.report.estimate import (
    estimate_json,
    estimate_table,
    explain_table,
    gpus_rows,
    gpus_table,
    rule_of_thumb_json,
    rule_of_thumb_line,
    rule_of_thumb_text,
    states_table,
    verdict,
)


def _model_positional(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Keep the optional MODEL argument positional (``spec_options`` makes defaulted parameters keyword-only)
    and hand typer real annotation objects."""
    sig = inspect.signature(fn)
    # resolve this module's string annotations (``from __future__ import annotations``) here, where their
    # names (JsonFlag ...) exist; typer would otherwise look them up in the decorator's module
    hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    model = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params if p.name == "model"]
    fn.__signature__ = sig.replace(parameters=model + [p for p in params if p.name != "model"])  # type: ignore[attr-defined]
    return fn


@app.command("estimate")
@_model_positional
@spec_options()
def estimate_command(
    model: str | None = typer.Argument(None, help="catalogue name, config.json path or a directory with one, or a "
                                       "Hub id (org/name, from the local HF cache); not needed with --rule-of-thumb "
                                       "or a --config that names the model"),
    json_out: JsonFlag = False,
    explain: Annotated[bool, typer.Option("--explain", help="show the formula and numbers behind each figure")]
    = False,
    rule_of_thumb: Annotated[bool, typer.Option("--rule-of-thumb", help="the lesson's L*b*s*h*20 bytes only")]
    = False,
    layers: Annotated[int | None, typer.Option("--layers", help="L for --rule-of-thumb without a model")] = None,
    hidden: Annotated[int | None, typer.Option("--hidden", help="h for --rule-of-thumb without a model")] = None,
    html: HtmlOption = None,
    force: ForceOption = False,
    gpu: GpuFlag = None,
    headroom: HeadroomFlag = None,
    check: CheckFlag = False,
    *,
    spec: RunSpec,
    config_import: Any = None,
) -> None:
    """Predict the peak memory of one training step of MODEL and where every byte goes. With --gpu, whether
    it fits: reserved (peak + allocator + CUDA context) + headroom <= the GPU, the rule memfit fit uses too.
    With --sharding zero1|zero2|zero3 --gpus N (DeepSpeed ZeRO stages; FSDP SHARD_GRAD_OP = zero2, FULL_SHARD =
    zero3) every figure is per GPU. Exit codes: 0 an answer, 1 bad input, 2 usage, 3 does not fit (with --check)."""
    if rule_of_thumb and html is not None:
        raise MemfitError("--html draws the full estimate: drop --rule-of-thumb (its one figure needs no chart)")
    check_html(html, force)
    if rule_of_thumb:
        unused = sorted(explicit_flags([*SPEC_OPTIONS, "gpu", "headroom", "check", "explain"]) - {"batch", "seq"})
        if unused:
            flags = ", ".join("--" + n.replace("_", "-") for n in unused)
            raise MemfitError(f"--rule-of-thumb is L*b*s*h*20 from --batch, --seq and --layers/--hidden (or a "
                              f"MODEL) only: drop {flags}")
        if model is not None:
            shape = resolve_model(model)
            layers = layers or shape.n_layers
            hidden = hidden or shape.hidden
        if layers is None or hidden is None:
            raise MemfitError("--rule-of-thumb needs --layers and --hidden (or a MODEL to read them from)")
        value = rule_of_thumb_activation_bytes(layers, spec.batch, spec.seq, hidden)
        if json_out:
            print_json(rule_of_thumb_json(layers, hidden, spec.batch, spec.seq, value))
        else:
            console.print(rule_of_thumb_text(layers, hidden, spec.batch, spec.seq, value), highlight=False)
        return
    if model is None:
        raise MemfitError("pass a MODEL (see `memfit models`, a config.json or a Hub id), a --config that names "
                          "one, or --rule-of-thumb with --layers and --hidden")
    if (layers is not None or hidden is not None):
        raise MemfitError("--layers and --hidden are for --rule-of-thumb; with a MODEL they come from its config: "
                          "drop them")
    target = target_from_options(gpu, headroom, check=check)
    est = estimate_memory(resolve_model(model), spec)
    write_html(html, "estimate", estimate_json(est, target), force)
    if json_out:
        out = estimate_json(est, target)
        if config_import is not None:
            out["config_import"] = config_import.to_json()
        print_json(out)
    else:
        print_config_import(config_import)
        console.print(estimate_table(est))
        console.print(states_table(est))
        console.print(rule_of_thumb_line(est), highlight=False)
        if explain:
            console.print(explain_table(est))
        console.print(verdict(est, target), highlight=False)
    if check and target is not None and not target.fits(est.peak_bytes, spec.device, reserved=est.reserved_bytes):
        raise typer.Exit(EXIT_DOES_NOT_FIT)


@app.command("gpus")
def gpus_command(json_out: JsonFlag = False) -> None:
    """List the bundled GPU table: memory in bytes and GiB, with the datasheet each figure comes from."""
    rows = gpus_rows()
    if json_out:
        print_json(rows)
    else:
        console.print(gpus_table(rows))
