"""memfit's command line: thin typer commands over the computing layers.

Each command lives in its own module and registers on the one ``app``; :func:`main` turns what can go wrong
into one line and an exit code (README, "Exit codes"):

=========================================  ====  ==============================================================
what                                       code  printed
=========================================  ====  ==============================================================
a :class:`MemfitError` (bad input)         1     ``error: ...`` in red on stderr
a usage error (click: unknown option ...)  2     typer's usage box on stderr
``--check`` and the run does not fit       3     the answer as usual (not an error)
Ctrl-C (SIGINT) or SIGTERM                 130   ``interrupted (SIGINT): ...`` on stderr; partial files removed
=========================================  ====  ==============================================================

Under ``--json`` every error is instead ONE JSON object on stdout, ``{"error": ..., "hint": ..., "exit_code":
...}`` with the same exit code (``hint`` is the fix the message names, or null), so a program calling
``memfit ... --json`` always reads JSON. Usage errors come from click before any command runs, so ``--json`` is
looked for in the arguments themselves.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

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
from memfit.cli import lab as _lab  # noqa: E402,F401  isort: skip

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_USAGE", "Interrupted", "app", "json_requested", "main"]

EXIT_BAD_INPUT = 1
EXIT_USAGE = 2  # click's UsageError.exit_code
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention; SIGTERM ends the same way


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwinds like KeyboardInterrupt (every ``finally`` and ``except BaseException``
    runs, so atomic writers remove their temporary files), but is not one, so typer does not swallow it."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


def json_requested(args: list[str]) -> bool:
    """``--json`` among the options (before a ``--`` that ends them)."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """While the command runs, SIGINT and SIGTERM raise :class:`Interrupted` (a second signal during the
    unwinding is ignored: removing a temporary file takes milliseconds). The previous handlers come back
    after. Outside the main thread (signals cannot be set there) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _fail(error: str, hint: str | None, code: int, as_json: bool, line: str | None = None) -> int:
    """Report an error: one JSON object on stdout under --json, else one red line on stderr (``line``, or
    the error and the hint joined)."""
    if as_json:
        sys.stdout.write(json.dumps({"error": error, "hint": hint, "exit_code": code}) + "\n")
        sys.stdout.flush()
        return code
    from rich.markup import escape

    from memfit.report import err_console

    text = line if line is not None else f"{error}: {hint}" if hint else error
    err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False)
    return code


def _usage_json(exc: Any) -> int:
    """A click usage error (unknown option, missing argument, bad value) as the --json error object."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "memfit"
    hint = f"'{where} -h' lists the options and arguments"
    for marker in (" (Possible options: ", "\nDid you mean", " Did you mean"):
        if marker in message:
            head, tail = message.split(marker, 1)
            said = marker.strip(" (\n").lower() + " " + tail.strip().rstrip(")")
            message, hint = head.strip(), f"{said}; {hint}"
            break
    return _fail(message.strip(), hint, exc.exit_code, True)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and return its exit code (module docstring: what each failure prints)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = json_requested(args)
    with interrupts_raise():
        try:
            return _run(args, as_json)
        except (Interrupted, KeyboardInterrupt) as exc:
            name = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
            return _fail(f"interrupted ({name})", "nothing was written: run the command again", EXIT_INTERRUPTED,
                         as_json)


def _run(args: list[str], as_json: bool) -> int:
    from memfit.cli._app import click_exceptions

    usage_error, abort, exit_ = click_exceptions()
    try:
        if as_json:
            rv = app(args=args, prog_name="memfit", standalone_mode=False)
            return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        app(args=args, prog_name="memfit", standalone_mode=True)
    except MemfitError as exc:
        return _fail(exc.error, exc.hint, EXIT_BAD_INPUT, as_json, line=str(exc))
    except usage_error as exc:  # only under --json (standalone mode prints and exits itself)
        return _usage_json(exc)
    except abort:  # click's Abort: an EOF on a prompt (memfit asks none)
        return _fail("aborted", None, EXIT_BAD_INPUT, as_json)
    except exit_ as exc:
        return int(exc.exit_code)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        if not as_json:
            raise
        import traceback

        traceback.print_exc(file=sys.stderr)  # a bug: the details go to stderr, the JSON stays one object
        return _fail(f"internal error ({type(exc).__name__}: {exc})",
                     "this is a bug in memfit: report it with the command line and the traceback above",
                     EXIT_BAD_INPUT, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
