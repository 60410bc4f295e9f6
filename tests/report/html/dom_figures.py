"""Read every figure a report page shows back out of its HTML (or the DOM a browser built) and compare it
with the JSON it was rendered from.

Each figure is an element with ``data-json`` (its JSON path as a list of keys and indices) and
``data-unit``; its text is the number as a person reads it. The units are defined here, independently of
the code under test: GiB = 1024**3 B, MiB = 1024**2 B, KiB = 1024 B, GB = 10**9 B, % = a fraction x 100.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

DIVISORS = {"GiB": 1024**3, "MiB": 1024**2, "KiB": 1024, "GB": 10**9}


class _Figures(HTMLParser):
    """Collects ``(path, unit, text)`` for every element carrying ``data-json``."""

    VOID = {"br", "img", "meta", "link", "input", "hr", "rect", "line", "circle", "polygon", "polyline", "path"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, list[str] | None]] = []
        self.found: list[tuple[list[Any], str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in self.VOID:
            return
        if "data-json" in a:
            self.stack.append((tag, [json.dumps([json.loads(a["data-json"] or "[]"), a.get("data-unit", "")])]))
        else:
            self.stack.append((tag, None))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        while self.stack:
            t, buf = self.stack.pop()
            if buf is not None:
                path, unit = json.loads(buf[0])
                self.found.append((path, unit, "".join(buf[1:]).strip()))
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, buf in self.stack:
            if buf is not None:
                buf.append(data)


def figures(html: str) -> list[tuple[list[Any], str, str]]:
    parser = _Figures()
    parser.feed(html)
    parser.close()
    return parser.found


def resolve(data: Any, path: list[Any]) -> Any:
    for key in path:
        data = data[key]
    return data


def _number(text: str) -> tuple[float, int]:
    """The number in ``text`` and its count of decimals: ``"68.84 GiB"`` -> ``(68.84, 2)``."""
    m = re.search(r"-?[0-9][0-9,]*(?:\.([0-9]+))?", text)
    if not m:
        raise AssertionError(f"no number in {text!r}")
    return float(m.group(0).replace(",", "")), len(m.group(1) or "")


def check(html: str, data: Any) -> list[tuple[Any, ...]]:
    """Assert that every figure on the page equals its JSON value at the precision shown; return the paths."""
    seen = []
    for path, unit, text in figures(html):
        value = resolve(data, path)
        shown, decimals = _number(text)
        if unit == "B":
            assert text.endswith(" B"), (path, text)
            assert int(shown) == value and decimals == 0, (path, text, value)
        else:
            expected = value * 100 if unit == "%" else value / DIVISORS.get(unit, 1)
            if unit == "x":
                assert text.startswith("x"), (path, text)
            elif unit:
                assert text.endswith(unit), (path, text, unit)
            tolerance = 0.5 * 10.0**-decimals + 1e-9 * max(1.0, abs(expected))
            if decimals == 0 and unit == "" and isinstance(value, int):
                assert shown == value, (path, text, value)
            assert abs(shown - expected) <= tolerance, (path, text, value, unit)
        seen.append(tuple(path))
    return seen
