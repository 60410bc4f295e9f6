"""bench/RESULTS.md is shared: each benchmark owns one ``## name`` section and replaces only that."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(name: str, body: str) -> None:
    """Replace (or append) the ``## name`` section of RESULTS.md with ``body``."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    section = f"## {name}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text.rstrip() + "\n", encoding="utf-8")
