"""The ``--html FILE`` / ``--force`` options every reporting command shares, and the one way they write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

HtmlOption = Annotated[Path | None, typer.Option(
    "--html", help="also write a self-contained HTML report (charts and tables, opens from disk) to this file")]
ForceOption = Annotated[bool, typer.Option("--force", help="replace existing output files (--html, --plot, "
                                                             "fit --write)")]


def check_html(path: Path | None, force: bool) -> None:
    """Before any slow work: fail now if the page could not be written (exists without --force, no folder)."""
    if path is not None:
        from memfit.report.html.write import check_target

        check_target(path, force=force)


def write_html(path: Path | None, command: str, result: Any, force: bool) -> None:
    """Render ``result`` exactly as ``--json`` prints it (the same page ``memfit report`` makes from that JSON)
    and write it atomically; say where on stderr, so ``--json`` output stays clean."""
    if path is None:
        return
    from memfit.report import err_console, json_default
    from memfit.report.html import render_page, write_report

    data = json.loads(json.dumps(result, default=json_default))
    target = write_report(path, render_page(data, command=command), force=force)
    err_console.print(f"HTML report written to {target}", highlight=False)
