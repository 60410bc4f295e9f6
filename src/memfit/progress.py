"""The progress bar of work that takes seconds: what is being done, how far (with the unit), the rate and the
time left, on stderr; nothing at all under ``--json`` or when stderr is not a terminal (a pipe, a log file, CI).

Computing code takes a plain callback ``on_progress(done, total)`` and never draws; the CLI (or a caller passing
``progress=True``) opens a :func:`progress_bar` and hands its ``update`` on. rich is imported only when a bar
is shown.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ProgressCallback", "interactive", "progress_bar"]

ProgressCallback = Callable[[int, int], None]  # (done, total); total 0 = unknown


def interactive(json_out: bool = False) -> bool:
    """Whether to draw a bar: not under ``--json`` and only when stderr is a terminal."""
    if json_out:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


class _Bar:
    """``update(done, total)`` and ``describe(text)`` on one rich task."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def update(self, done: int, total: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total or None)

    def describe(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)


@contextlib.contextmanager
def progress_bar(description: str, *, total: int = 0, unit: str = "", enabled: bool | None = None,
                 console: Any = None) -> Iterator[_Bar]:
    """A transient bar on stderr: ``description``, the bar, done/total (``unit`` ``"bytes"`` shows MB, else
    counts followed by ``unit``), the rate, the time left (ETA) and the time so far. ``enabled=None`` means
    :func:`interactive`. Yields an object with ``update(done, total)``, ``advance(n)`` and ``describe(text)``;
    disabled, they do nothing. ``console``: where to draw (default: a rich Console on stderr)."""
    if enabled is None:
        enabled = interactive()
    if not enabled:
        yield _Bar(None, None)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    amount: list[Any] = ([DownloadColumn(), TransferSpeedColumn()] if unit == "bytes"
                         else [MofNCompleteColumn(), TextColumn(unit)] if unit else [MofNCompleteColumn()])
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), *amount,
               TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console or Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total or None)
        yield _Bar(progress, task)

