"""The budget chart: one horizontal bar per row, stacked by category, against the GPU's capacity line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memfit.report.html.axis import WIDTH, ByteAxis, Capacity, capacity_vertical, legend, svg, x_axis_bytes
from memfit.report.html.figures import exact, human
from memfit.report.html.geometry import LinearScale, stack
from memfit.report.html.markup import Html, el, join
from memfit.report.html.palette import RESERVED_COLOUR, colour, label, ordered

LEFT = 22  # bars start here; each row's label and total sit on a line above its bar
LABEL_H = 18
ROW_H = 22
ROW_GAP = 14
TOP = 30  # room for the capacity label
BOTTOM = 30  # room for the tick labels


@dataclass(frozen=True, slots=True)
class BarRow:
    """One bar: its label, bytes by category, and bytes reserved beyond them (allocator + CUDA context),
    drawn as a pale segment after the stack."""

    label: str
    parts: Mapping[str, int]
    reserved_extra: int = 0
    note: str = ""  # a short text after the bar's total ("s/step 1.79")

    @property
    def total(self) -> int:
        return sum(v for v in self.parts.values() if v > 0)


@dataclass(frozen=True, slots=True)
class BudgetChart:
    rows: Sequence[BarRow]
    capacity: Capacity | None = None
    title: str = "memory by category"
    group_gap_after: frozenset[int] = field(default_factory=frozenset)  # extra space after these row indices


def budget_chart(chart: BudgetChart) -> Html:
    """SVG bars plus an HTML legend of the categories present."""
    rows = chart.rows
    cats = ordered({k for r in rows for k, v in r.parts.items() if v > 0})
    high = max([r.total + r.reserved_extra for r in rows] + [chart.capacity.bytes if chart.capacity else 0])
    axis = ByteAxis.fit(high)
    x0, x1 = LEFT, WIDTH - 24
    xs = LinearScale(0, axis.top, x0, x1)
    compact = len(rows) > 6  # many points: thinner bars
    row_h, gap = (14, 10) if compact else (ROW_H, ROW_GAP)
    y = float(TOP)
    body: list[Html] = []
    labels: list[Html] = []  # drawn last, over the capacity line (their white halo keeps them legible)
    for i, row in enumerate(rows):
        st = stack(row.parts, cats)
        bar_y = y + LABEL_H - (2 if compact else 0)
        segs = []
        for cat in cats:
            lo, hi = st[cat]
            if hi <= lo:
                continue
            tip = f"{row.label}: {label(cat)} {exact(int(hi - lo))} ({human(hi - lo)})"
            segs.append(el("rect", [el("title", tip)], x=xs(lo), y=bar_y, width=max(xs(hi) - xs(lo), 0.5),
                           height=row_h, fill=colour(cat)))
        end = row.total
        if row.reserved_extra > 0:
            tip = (f"{row.label}: reserved beyond the allocated peak (allocator + CUDA context) "
                   f"{exact(row.reserved_extra)} ({human(row.reserved_extra)})")
            segs.append(el("rect", [el("title", tip)], x=xs(end), y=bar_y,
                           width=xs(end + row.reserved_extra) - xs(end), height=row_h, fill=RESERVED_COLOUR,
                           class_="reserved"))
        value = human(row.total) + (f", {human(row.total + row.reserved_extra)} reserved"
                                    if row.reserved_extra > 0 else "")
        if row.note:
            value += f" · {row.note}"
        body.append(el("g", segs, class_="row"))
        labels.append(el("text", [el("tspan", row.label, class_="rowlabel"), el("tspan", f"  {value}", class_="val")],
                         x=x0, y=y + LABEL_H - 5, class_="rowtext"))
        y += LABEL_H + row_h + gap + (12 if i in chart.group_gap_after else 0) - (2 if compact else 0)
    y_bottom = y - gap + 6
    grid = x_axis_bytes(axis, xs, TOP - 6, y_bottom)
    cap = Html("")
    if chart.capacity is not None:
        cx = xs(chart.capacity.bytes)
        cap = capacity_vertical(cx, TOP - 2, y_bottom, chart.capacity.text(), anchor_right=cx > WIDTH * 0.55)
    picture = svg(y_bottom + BOTTOM, [grid, *body, cap, *labels], chart.title)
    keys = [(label(c), colour(c)) for c in cats]
    if any(r.reserved_extra for r in rows):
        keys.append(("reserved (allocator + CUDA context)", RESERVED_COLOUR))
    lines = [(chart.capacity.name, "#c62828")] if chart.capacity else []
    return join([picture, legend(keys, line=lines)])


__all__ = ["BarRow", "BudgetChart", "Capacity", "budget_chart"]
