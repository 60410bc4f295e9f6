"""Padding waste of random / length-grouped / packed batches: tokens processed, real and padding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memfit.report.html.axis import WIDTH, legend, svg
from memfit.report.html.geometry import LinearScale, nice_max, nice_ticks
from memfit.report.html.histogram import count_label
from memfit.report.html.markup import Html, el, join

REAL = "#4e79a7"
PAD = "#f28e2b"


@dataclass(frozen=True, slots=True)
class PaddingRow:
    strategy: str
    real_tokens: int
    padding_tokens: int
    waste: float  # padding / processed


def padding_chart(rows: Sequence[PaddingRow], title: str = "tokens processed per epoch") -> Html:
    left, top, row_h, gap = 130, 10, 24, 10
    high = max(r.real_tokens + r.padding_tokens for r in rows)
    x_top = nice_max(high, 5)
    x0, x1 = left, WIDTH - 100
    xs = LinearScale(0, x_top, x0, x1)
    body = []
    y = float(top)
    for r in rows:
        processed = r.real_tokens + r.padding_tokens
        body.append(el("g", [
            el("text", r.strategy, x=x0 - 8, y=y + row_h / 2 + 4.5, text_anchor="end", class_="rowlabel"),
            el("rect", [el("title", f"{r.strategy}: {r.real_tokens:,} real tokens")], x=x0, y=y,
               width=xs(r.real_tokens) - x0, height=row_h, fill=REAL),
            el("rect", [el("title", f"{r.strategy}: {r.padding_tokens:,} padding tokens ({r.waste:.1%} of "
                                    f"{processed:,} processed)")],
               x=xs(r.real_tokens), y=y, width=max(xs(processed) - xs(r.real_tokens), 0.5), height=row_h, fill=PAD),
            el("text", f"{r.waste:.1%} padding", x=xs(processed) + 6, y=y + row_h / 2 + 4.5, class_="val"),
        ]))
        y += row_h + gap
    y_bottom = y - gap + 4
    grid = []
    for t in nice_ticks(0, x_top, 5):
        grid.append(el("line", x1=xs(t), x2=xs(t), y1=top - 4, y2=y_bottom, class_="grid"))
        grid.append(el("text", count_label(t), x=xs(t), y=y_bottom + 16, text_anchor="middle", class_="tick"))
    grid.append(el("text", "tokens", x=(x0 + x1) / 2, y=y_bottom + 34, text_anchor="middle", class_="axislabel"))
    return join([svg(y_bottom + 42, [*grid, *body], title),
                 legend([("real tokens", REAL), ("padding tokens", PAD)])])
