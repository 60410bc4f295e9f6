"""Reading a ``--json`` result and writing the page: atomically (a temporary file beside the target, then a
rename), replacing an existing file only when asked (``--force``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.files import check_output, write_atomic


def check_target(path: str | os.PathLike[str], *, force: bool) -> Path:
    """Fail early (before a slow trace or measurement) when the page could not be written
    (:func:`memfit.files.check_output`)."""
    return check_output(path, flag="--html", force=force, example="report.html")


def write_report(path: str | os.PathLike[str], html: str, *, force: bool = False) -> Path:
    """Write ``html`` to ``path`` atomically: readers see the old file or the whole new one, never a part
    (:func:`memfit.files.write_atomic`: a temporary file beside the target, then a rename)."""
    return write_atomic(path, html, flag="--html", force=force, example="report.html")


def load_result(path: str) -> tuple[Any, str]:
    """A command's ``--json`` output from a file (or ``-`` for stdin): ``(data, name to show)``."""
    if path == "-":
        text, name = sys.stdin.read(), "standard input"
    else:
        p = Path(path)
        if not p.is_file():
            raise MemfitError(f"no file at {p}: pass the JSON written by a memfit command's --json "
                              "(e.g. memfit estimate MODEL --json > result.json)")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise MemfitError(f"{p} is not UTF-8 text ({exc.reason}): pass the JSON a memfit command's --json "
                              "wrote") from exc
        name = p.name
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MemfitError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): pass the "
                          "output of a memfit command's --json") from exc
    return data, name
