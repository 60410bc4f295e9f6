"""``memfit report``: the HTML page of any command's ``--json`` output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memfit.cli._app import app


@app.command("report")
def report_command(
    result: Annotated[str, typer.Argument(help="JSON written by memfit estimate, trace, measure, fit or lengths "
                                          "with --json (- reads standard input)")],
    html: Annotated[Path, typer.Option("--html", help="the HTML file to write")],
    force: Annotated[bool, typer.Option("--force", help="replace the --html file if it exists")] = False,
) -> None:
    """Write a self-contained HTML report (inline SVG charts, exact bytes in tables) from a command's --json
    output; the command is recognised from the JSON's keys."""
    from memfit.report import err_console
    from memfit.report.html import detect_command, load_result, render_page, write_report
    from memfit.report.html.write import check_target

    check_target(html, force=force)
    data, name = load_result(result)
    command = detect_command(data)
    target = write_report(html, render_page(data, command=command, source=name), force=force)
    err_console.print(f"{command} report written to {target}", highlight=False)
