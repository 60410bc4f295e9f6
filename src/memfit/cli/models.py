"""``memfit models`` and ``memfit params``: the catalogue and exact parameter counts."""

from __future__ import annotations

from typing import Annotated

import typer

from memfit.cli._app import JsonFlag, app
from memfit.estimate import catalogue, count_params, resolve_model
from memfit.report import console, print_json
from memfit.report.models import models_rows, models_table, params_json, params_table


@app.command("models")
def models_command(json_out: JsonFlag = False) -> None:
    """List the bundled catalogue: name, parameters, layers, hidden, vocab, and the model card."""
    rows = models_rows(catalogue())
    if json_out:
        print_json(rows)
    else:
        console.print(models_table(rows))


@app.command("params")
def params_command(
    model: Annotated[str, typer.Argument(help="catalogue name, config.json path, or a directory with one")],
    json_out: JsonFlag = False,
) -> None:
    """Exact parameter count of MODEL, by module kind (q_proj, k_proj, ..., lm_head, norms)."""
    shape = resolve_model(model)
    counts = count_params(shape)
    if json_out:
        print_json(params_json(shape, counts))
    else:
        console.print(params_table(shape, counts))
