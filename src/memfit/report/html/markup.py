"""Escaped HTML and SVG building: every piece of user text (model names, file paths, module paths) goes
through :func:`html.escape`; already-built markup is an :class:`Html` and is inserted as it is."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping


class Html(str):
    """Markup that is already escaped (inserted verbatim); a plain ``str`` is text and gets escaped."""

    __slots__ = ()


def esc(text: object) -> Html:
    """Escape text for an element body or a quoted attribute.

    >>> esc('<b>"x" & y</b>')
    '&lt;b&gt;&quot;x&quot; &amp; y&lt;/b&gt;'
    """
    return Html(html.escape(str(text), quote=True))


def _attr_value(value: object) -> str:
    if isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(value)


def attrs(values: Mapping[str, object | None]) -> str:
    """`` name="value"`` pairs, escaped; ``None`` and ``False`` drop the attribute; a trailing ``_`` is cut
    (``class_=``), other underscores become dashes (``stroke_width`` -> ``stroke-width``).

    >>> attrs({"class_": "bar", "x": 1.005, "data_json": 'a"b', "hidden": None})
    ' class="bar" x="1" data-json="a&quot;b"'
    """
    out = []
    for key, value in values.items():
        if value is None or value is False:
            continue
        name = key[:-1] if key.endswith("_") else key.replace("_", "-")
        out.append(f' {name}="{esc(_attr_value(value))}"')
    return "".join(out)


def join(parts: Iterable[str]) -> Html:
    """Concatenate pieces: :class:`Html` as it is, plain strings escaped."""
    return Html("".join(p if isinstance(p, Html) else esc(p) for p in parts))


def el(tag: str, body: Iterable[str] | str | None = None, /, **values: object | None) -> Html:
    """One element: ``el("td", "7 B", class_="num")`` -> ``<td class="num">7 B</td>``. A body of ``None``
    makes a self-closing (SVG) element.

    >>> el("text", "a<b", x=3)
    '<text x="3">a&lt;b</text>'
    >>> el("rect", width=2.5)
    '<rect width="2.5"/>'
    """
    if body is None:
        return Html(f"<{tag}{attrs(values)}/>")
    inner = join([body]) if isinstance(body, str) else join(body)
    return Html(f"<{tag}{attrs(values)}>{inner}</{tag}>")


def points(coords: Iterable[tuple[float, float]]) -> str:
    """An SVG ``points`` attribute with two decimals.

    >>> points([(0, 1.234), (2.5, 3)])
    '0,1.23 2.5,3'
    """
    return " ".join(f"{_attr_value(float(x))},{_attr_value(float(y))}" for x, y in coords)
