"""The typer application every command module registers on."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="memfit",
    help="Will this fine-tuning run fit in GPU memory? Where every byte goes, and the cheapest change "
    "that makes it fit. Sizes: GiB = 1024^3 bytes, GB = 10^9 bytes.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

# ``--json`` on every command: the result (or one {error, hint, exit_code} object) as JSON on stdout
JsonFlag = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def click_exceptions() -> tuple[type[Exception], type[BaseException], type[BaseException]]:
    """The click exception types typer raises without standalone mode: ``(ClickException, Abort, Exit)``
    (typer 0.29 vendors click as ``typer._click``; its Abort and Exit live in ``typer.exceptions``)."""
    from typer import _click
    from typer.exceptions import Abort, Exit

    return _click.exceptions.ClickException, Abort, Exit
