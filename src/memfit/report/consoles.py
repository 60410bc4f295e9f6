"""The two rich consoles every report prints to: ``console`` (stdout) and ``err_console`` (stderr, for
messages that must not mix with ``--json`` output)."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

__all__ = ["console", "err_console"]
