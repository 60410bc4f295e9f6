"""Plain bar charts: columns (bytes per decoder layer) and rows (bytes per op kind, per phase)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memfit.report.html.axis import WIDTH, ByteAxis, svg, x_axis_bytes, y_axis_bytes
from memfit.report.html.figures import exact, human
from memfit.report.html.geometry import LinearScale, bands
from memfit.report.html.markup import Html, el
from memfit.report.html.palette import ACCENT


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int
    colour: str = ACCENT
    tip: str = ""


def column_chart(bars: Sequence[Bar], title: str, x_title: str = "") -> Html:
    """Vertical bars over a byte axis; with many bars only every k-th is labelled (all have a tooltip)."""
    left, right, top, plot_h = 64, 10, 16, 200
    axis = ByteAxis.fit(max([b.value for b in bars] + [1]))
    ys = LinearScale(0, axis.top, top + plot_h, top)
    x0, x1 = left, WIDTH - right
    n = len(bars)
    gap = 2.0 if n > 40 else 4.0
    slots = bands([1] * n, x1 - x0, gap=gap)
    every = max(1, math.ceil(n / 24))
    body = [y_axis_bytes(axis, ys, x0, x1)]
    for i, (bar, (start, width)) in enumerate(zip(bars, slots, strict=True)):
        x = x0 + start
        tip = bar.tip or f"{bar.label}: {exact(bar.value)} ({human(bar.value)})"
        body.append(el("rect", [el("title", tip)], x=x, y=ys(bar.value), width=width,
                       height=max(ys(0) - ys(bar.value), 0), fill=bar.colour))
        if i % every == 0:
            body.append(el("text", bar.label, x=x + width / 2, y=top + plot_h + 15, text_anchor="middle",
                           class_="tick"))
    bottom = top + plot_h + 22
    if x_title:
        body.append(el("text", x_title, x=(x0 + x1) / 2, y=bottom + 14, text_anchor="middle", class_="axislabel"))
        bottom += 22
    return svg(bottom, body, title)


def row_chart(bars: Sequence[Bar], title: str, label_width: int = 200) -> Html:
    """Horizontal bars over a byte axis, labels on the left, each value written after its bar."""
    row_h, gap, top = 18, 6, 10
    axis = ByteAxis.fit(max([b.value for b in bars] + [1]))
    x0, x1 = label_width, WIDTH - 78
    xs = LinearScale(0, axis.top, x0, x1)
    body = []
    y = float(top)
    for bar in bars:
        tip = bar.tip or f"{bar.label}: {exact(bar.value)} ({human(bar.value)})"
        room = int(label_width / 7.2)  # characters that fit left of the bars at 13 px
        text = bar.label if len(bar.label) <= room else "…" + bar.label[-(room - 1):]
        body.append(el("g", [
            el("title", tip),
            el("text", text, x=x0 - 8, y=y + row_h / 2 + 4.5, text_anchor="end", class_="rowlabel small"),
            el("rect", x=x0, y=y, width=max(xs(bar.value) - x0, 0.5), height=row_h, fill=bar.colour),
            el("text", human(bar.value), x=xs(bar.value) + 5, y=y + row_h / 2 + 4.5, class_="val small"),
        ]))
        y += row_h + gap
    y_bottom = y - gap + 4
    return svg(y_bottom + 26, [x_axis_bytes(axis, xs, top - 4, y_bottom), *body], title)
