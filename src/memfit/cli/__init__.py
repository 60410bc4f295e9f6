"""memfit's command line: thin typer commands over the computing layers.

Each command lives in its own module and registers on the one ``app``; a :class:`MemfitError` from any
layer becomes one red line and exit code 1.
"""

from __future__ import annotations

import sys

from memfit.cli._app import app
from memfit.errors import MemfitError

# Command modules register themselves on import (order = order in --help).
from memfit.cli import models as _models  # noqa: E402,F401  isort: skip
from memfit.cli import estimate as _estimate  # noqa: E402,F401  isort: skip
from memfit.cli import demo as _demo  # noqa: E402,F401  isort: skip
from memfit.cli import measure as _measure  # noqa: E402,F401  isort: skip
from memfit.cli import trace as _trace  # noqa: E402,F401  isort: skip
from memfit.cli import lengths as _lengths  # noqa: E402,F401  isort: skip
from memfit.cli import pack as _pack  # noqa: E402,F401  isort: skip
from memfit.cli import fit as _fit  # noqa: E402,F401  isort: skip

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning MemfitError into one line on stderr and exit code 1."""
    from memfit.report import err_console

    try:
        app(args=argv, standalone_mode=False)
    except MemfitError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 1
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/]")
        return 130
    except SystemExit as exc:  # typer/click exits (--help, usage errors)
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.exceptions.Exit):
            return exc.exit_code
        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            return 1
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
