"""The length distribution: a histogram of examples per token bin with the CDF over it, p95, the
recommended sequence length and the share it truncates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memfit.report.html.axis import WIDTH, legend, svg
from memfit.report.html.geometry import LinearScale, nice_max, nice_ticks
from memfit.report.html.markup import Html, el, join, points
from memfit.report.html.palette import ACCENT

CDF_COLOUR = "#f28e2b"
P95_COLOUR = "#6f42c1"


def count_label(n: float) -> str:
    """``1500`` -> ``1.5k``, ``2000000`` -> ``2M``: compact tick labels for counts (tokens, examples).

    >>> count_label(0), count_label(750), count_label(1500), count_label(2_000_000)
    ('0', '750', '1.5k', '2M')
    """
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:g}{suffix}"
    return f"{n:g}"


@dataclass(frozen=True, slots=True)
class Marker:
    at: float  # tokens
    short: str  # on the chart, above the line ("p95 337")
    text: str  # in the legend and the tooltip
    colour: str
    dashed: bool = False


def cdf_points(edges: Sequence[int], counts: Sequence[int]) -> list[tuple[float, float]]:
    """The empirical CDF at each bin's right edge: ``(edge, share of examples shorter than it)``, starting
    from ``(first edge, 0)``.

    >>> cdf_points([0, 5, 10, 15], [1, 2, 1])
    [(0, 0.0), (5, 0.25), (10, 0.75), (15, 1.0)]
    """
    total = sum(counts) or 1
    out: list[tuple[float, float]] = [(edges[0], 0.0)]
    running = 0
    for edge, c in zip(edges[1:], counts, strict=False):
        running += c
        out.append((edge, running / total))
    return out


def histogram_chart(edges: Sequence[int] | None, counts: Sequence[int] | None,
                    cdf: Sequence[tuple[float, float]], markers: Sequence[Marker], *, truncate_from: float | None,
                    truncated_text: str = "", title: str = "token lengths") -> Html:
    """Bars of examples per bin (when the JSON has a histogram), the CDF line on a 0-100% right axis, the
    markers as vertical lines, and the tokens beyond ``truncate_from`` shaded."""
    left, right, top, plot_h = 58, 44, 44, 240
    x_hi = max(list(edges or [0]) + [m.at for m in markers] + [p[0] for p in cdf])
    x_lo = min([edges[0]] if edges else [p[0] for p in cdf])
    x_lo = 0 if x_lo < 0.2 * x_hi else x_lo
    x_top = nice_max(x_hi, 6)
    x0, x1 = left, WIDTH - right
    xs = LinearScale(x_lo, x_top, x0, x1)
    y_bottom = top + plot_h
    body = []
    if truncate_from is not None and truncate_from < x_top:
        body.append(el("rect", [el("title", truncated_text.replace("\n", " "))], x=xs(truncate_from), y=top,
                       width=xs(x_top) - xs(truncate_from), height=plot_h, fill="#fdecea"))
        lines = truncated_text.split("\n")
        wide = xs(x_top) - xs(truncate_from) > 150
        tx = xs(truncate_from) + 8 if wide else x1 - 6
        body.append(el("text", [el("tspan", line, x=tx, dy=0 if i == 0 else 15) for i, line in enumerate(lines)],
                       x=tx, y=top + plot_h * 0.45, text_anchor="start" if wide else "end", class_="note-svg"))
    if edges and counts:
        c_top = nice_max(max(counts), 5)
        ys = LinearScale(0, c_top, y_bottom, top)
        for t in nice_ticks(0, c_top, 5):
            body.append(el("line", x1=x0, x2=x1, y1=ys(t), y2=ys(t), class_="grid"))
            body.append(el("text", count_label(t), x=x0 - 6, y=ys(t) + 4, text_anchor="end", class_="tick"))
        body.append(el("text", "examples", x=16, y=(top + y_bottom) / 2, text_anchor="middle", class_="axislabel",
                       transform=f"rotate(-90 16 {(top + y_bottom) / 2:.1f})"))
        for lo, hi, c in zip(edges, edges[1:], counts, strict=False):
            if c == 0:
                continue
            body.append(el("rect", [el("title", f"{lo}-{hi - 1} tokens: {c:,} examples")], x=xs(lo) + 0.5,
                           y=ys(c), width=max(xs(hi) - xs(lo) - 1, 0.8), height=ys(0) - ys(c), fill=ACCENT))
    yc = LinearScale(0, 1, y_bottom, top)
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(el("text", f"{t:.0%}", x=x1 + 6, y=yc(t) + 4, class_="tick cdf"))
    body.append(el("polyline", [el("title", "share of examples shorter than this (CDF)")],
                   points=points([(xs(x), yc(p)) for x, p in cdf]), fill="none", stroke=CDF_COLOUR, stroke_width=2.5))
    for t in nice_ticks(x_lo, x_top, 7):
        body.append(el("text", count_label(t), x=xs(t), y=y_bottom + 16, text_anchor="middle", class_="tick"))
    body.append(el("text", "tokens per example", x=(x0 + x1) / 2, y=y_bottom + 36, text_anchor="middle",
                   class_="axislabel"))
    for i, m in enumerate(sorted(markers, key=lambda m: m.at)):
        x = xs(m.at)
        body.append(el("g", [
            el("title", m.text),
            el("line", x1=x, x2=x, y1=top - 36 if i % 2 == 0 else top - 20, y2=y_bottom, stroke=m.colour,
               stroke_width=2, stroke_dasharray="5 4" if m.dashed else None),
            el("text", m.short, x=x + 4, y=top - 24 if i % 2 == 0 else top - 8, class_="marker", fill=m.colour),
        ]))
    keys = [("examples per bin", ACCENT)] if edges and counts else []
    keys.append(("CDF (right axis)", CDF_COLOUR))
    return join([svg(y_bottom + 46, body, title), legend(keys, line=[(m.text, m.colour) for m in markers])])

