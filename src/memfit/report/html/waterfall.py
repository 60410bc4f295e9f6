"""The fit path as a waterfall: the peak as given, each remedy's saving as a floating bar (its cost under
it), the plan's peak, against the budget and the GPU's capacity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memfit.report.html.axis import GUTTER, WIDTH, ByteAxis, Capacity, capacity_horizontal, legend, svg, y_axis_bytes
from memfit.report.html.figures import exact, human
from memfit.report.html.geometry import LinearScale, bands, waterfall
from memfit.report.html.markup import Html, el, join
from memfit.report.html.palette import BAD, GOOD

LEVEL = "#4e79a7"
CHEAPEST = "#76b7b2"


@dataclass(frozen=True, slots=True)
class Remedy:
    action: str
    peak_after: int
    time_factor: float | None = None
    cost: str = ""


def waterfall_chart(start: int, steps: Sequence[Remedy], *, budget: Capacity | None, capacity: Capacity | None,
                    cheapest: int | None = None, title: str = "the fit path") -> Html:
    left, top, plot_h = 70, 26, 260
    deltas = []
    level = start
    for s in steps:
        deltas.append(s.peak_after - level)
        level = s.peak_after
    spans = waterfall(start, deltas)
    final = level
    columns = [("as given", None)] + [(s.action, s.time_factor) for s in steps] + [("plan", None)]
    if cheapest is not None:
        columns.append(("cheapest overall", None))
    lines = [c for c in (budget, capacity) if c is not None]
    high = max([start, final, *(s.peak_after for s in steps), *(c.bytes for c in lines)]
               + ([cheapest] if cheapest is not None else []))
    axis = ByteAxis.fit(high)
    x0, x1 = left, WIDTH - (GUTTER if lines else 16)
    y_bottom = top + plot_h
    ys = LinearScale(0, axis.top, y_bottom, top)
    slots = bands([1] * len(columns), x1 - x0 - 12, gap=14)
    body = [y_axis_bytes(axis, ys, x0, x1)]
    bars: list[tuple[float, float, str, str, str]] = [(0, start, LEVEL, f"as given: {exact(start)} ({human(start)})",
                                                       human(start))]
    for s, (lo, hi), d in zip(steps, spans[1:], deltas, strict=True):
        saving = d <= 0
        tip = (f"{s.action}: {'saves' if saving else 'adds'} {exact(abs(d))} ({human(abs(d))}); peak after "
               f"{exact(s.peak_after)} ({human(s.peak_after)})" + (f"; {s.cost}" if s.cost else ""))
        bars.append((lo, hi, GOOD if saving else BAD, tip, ("−" if saving else "+") + human(abs(d))))
    bars.append((0, final, LEVEL, f"plan: {exact(final)} ({human(final)})", human(final)))
    if cheapest is not None:
        bars.append((0, cheapest, CHEAPEST, f"cheapest overall: {exact(cheapest)} ({human(cheapest)})",
                     human(cheapest)))
    levels = [start, *(s.peak_after for s in steps)]
    for i, ((start_x, width), (lo, hi, fill, tip, text), (name, factor)) in enumerate(
            zip(slots, bars, columns, strict=True)):
        x = x0 + 6 + start_x
        body.append(el("rect", [el("title", tip)], x=x, y=ys(hi), width=width, height=max(ys(lo) - ys(hi), 1),
                       fill=fill))
        body.append(el("text", text, x=x + width / 2, y=ys(hi) - 6, text_anchor="middle", class_="val small"))
        if 1 <= i <= len(steps) + 1:  # connector from the level before this column
            y = ys(levels[i - 1])
            body.append(el("line", x1=x - 14, x2=x, y1=y, y2=y, class_="connector"))
        words = name.replace("_", " ")
        body.append(el("text", [el("tspan", w, x=x + width / 2, dy=0 if j == 0 else 14)
                                for j, w in enumerate(_two_lines(words, max(int(width / 6.4), 8)))],
                       x=x + width / 2, y=y_bottom + 16, text_anchor="middle", class_="tick"))
        if factor is not None:
            body.append(el("text", f"time x{factor:.2f}", x=x + width / 2, y=y_bottom + 46, text_anchor="middle",
                           class_="tick muted"))
    # the two lines' labels sit in the gutter; keep them apart when the lines are close (budget = GPU - headroom)
    drawn = [c for c in lines if c is budget or budget is None or c.bytes != budget.bytes]
    placed: list[float] = []
    for c in sorted(drawn, key=lambda c: -c.bytes):  # top line first
        y = ys(c.bytes)
        dy = 0.0
        if placed and y - 3 < placed[-1] + 30:
            dy = placed[-1] + 30 - (y - 3)
        placed.append(y - 3 + dy)
        body.append(capacity_horizontal(y, x0, x1, c, dy=dy))
    keys = [("peak (as given, plan)", LEVEL), ("saving of a remedy", GOOD)]
    if any(d > 0 for d in deltas):
        keys.append(("increase", BAD))
    if cheapest is not None:
        keys.append(("cheapest configuration of the search", CHEAPEST))
    line_keys = [(c.name, "#c62828") for c in lines]
    return join([svg(y_bottom + 58, body, title), legend(keys, line=line_keys)])


def _two_lines(text: str, width: int) -> list[str]:
    words = text.split()
    first = ""
    while words and (not first or len(first) + 1 + len(words[0]) <= width):
        first = f"{first} {words.pop(0)}".strip()
    rest = " ".join(words)
    return [first] + ([rest if len(rest) <= width else rest[: width - 1] + "…"] if rest else [])

