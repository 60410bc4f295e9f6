"""``memfit demo``: what ``make demo`` runs on the bundled default."""

from __future__ import annotations

from memfit.cli._app import app
from memfit.estimate import catalogue, count_params, lookup
from memfit.report import console
from memfit.report.models import models_rows, models_table, params_table

DEMO_MODEL = "lesson-24x2048"


@app.command("demo")
def demo_command() -> None:
    """The lesson's worked example: the catalogue and the parameter breakdown of a 24-layer, 2048-wide model."""
    console.print(models_table(models_rows(catalogue())))
    shape = lookup(DEMO_MODEL).shape
    console.print(params_table(shape, count_params(shape)))
