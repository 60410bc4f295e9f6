"""Reading a ``--json`` result and writing the page: atomically (a temporary file beside the target, then a
rename), replacing an existing file only when asked (``--force``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError


def check_target(path: str | os.PathLike[str], *, force: bool) -> Path:
    """Fail early (before a slow trace or measurement) when the page could not be written."""
    target = Path(path)
    if target.is_dir():
        raise MemfitError(f"--html {target} is a directory: give a file name such as {target / 'report.html'}")
    if target.exists() and not force:
        raise MemfitError(f"{target} exists: pass --force to replace it, or choose another --html file")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise MemfitError(f"the folder {parent} does not exist: create it or choose another --html file")
    return target


def write_report(path: str | os.PathLike[str], html: str, *, force: bool = False) -> Path:
    """Write ``html`` to ``path`` atomically: readers see the old file or the whole new one, never a part.

    The temporary file is created in the target's folder (a rename within one file system is atomic) and
    given the permissions a new file would get (0666 less the umask).
    """
    target = check_target(path, force=force)
    parent = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(html)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if not force and target.exists():  # appeared while we rendered
            raise MemfitError(f"{target} exists: pass --force to replace it, or choose another --html file")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


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
