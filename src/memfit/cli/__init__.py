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
from memfit.cli import report as _report  # noqa: E402,F401  isort: skip

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a MemfitError becomes one red line on stderr and exit code 1.

    Usage errors (an unknown option, a missing argument) are typer's: usage and the error, exit code 2.
    """
    from memfit.report import err_console

    try:
        app(args=argv, standalone_mode=True)
    except MemfitError as exc:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 1
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/]")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
