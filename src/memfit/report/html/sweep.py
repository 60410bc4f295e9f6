"""The batch sweep: measured peak against micro-batch, one series per (sequence, checkpointing), each with
its least-squares line and R^2."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memfit.report.html.axis import GUTTER, WIDTH, ByteAxis, Capacity, capacity_horizontal, legend, svg, y_axis_bytes
from memfit.report.html.figures import exact, human
from memfit.report.html.geometry import LinearScale, nice_max, nice_ticks
from memfit.report.html.markup import Html, el, join, points


@dataclass(frozen=True, slots=True)
class LineFit:
    slope: float  # bytes per sample
    intercept: float  # bytes
    r2: float


@dataclass(frozen=True, slots=True)
class SweepSeries:
    name: str
    colour: str
    points: Sequence[tuple[int, int]]  # (batch, peak bytes)
    fit: LineFit | None = None
    dashed: bool = False  # with checkpointing: dashed line


def fit_line(fit: LineFit, x_from: float, x_to: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The fitted line's two ends in data units: ``(x, slope * x + intercept)``.

    >>> fit_line(LineFit(2.0, 6.0, 1.0), 0, 8)
    ((0, 6.0), (8, 22.0))
    """
    return (x_from, fit.slope * x_from + fit.intercept), (x_to, fit.slope * x_to + fit.intercept)


def sweep_chart(series: Sequence[SweepSeries], capacity: Capacity | None = None,
                title: str = "peak against micro-batch", x_title: str = "micro-batch (samples)") -> Html:
    left, top, plot_h = 70, 18, 260
    xmax_data = max(b for s in series for b, _ in s.points)
    xs_top = nice_max(xmax_data, 6)
    high = max([p for s in series for _, p in s.points]
               + [fit_line(s.fit, 0, xs_top)[1][1] for s in series if s.fit])
    cap_on_scale = capacity is not None and capacity.bytes <= 1.6 * high
    axis = ByteAxis.fit(max(high, capacity.bytes if capacity and cap_on_scale else 0))
    x0, x1 = left, WIDTH - (GUTTER if cap_on_scale else 16)
    xs = LinearScale(0, xs_top, x0, x1)
    y_bottom = top + plot_h
    ys = LinearScale(0, axis.top, y_bottom, top)
    body = [y_axis_bytes(axis, ys, x0, x1)]
    for t in nice_ticks(0, xs_top, 6):
        body.append(el("text", f"{t:g}", x=xs(t), y=y_bottom + 16, text_anchor="middle", class_="tick"))
    body.append(el("text", x_title, x=(x0 + x1) / 2, y=y_bottom + 36, text_anchor="middle",
                   class_="axislabel"))
    for s in series:
        if s.fit is not None:
            a, b = fit_line(s.fit, 0, xs_top)
            body.append(el("polyline", [el("title", f"{s.name}: fit {human(s.fit.slope)} per sample + "
                                                    f"{human(s.fit.intercept)}, R² = {s.fit.r2:.4f}")],
                           points=points([(xs(a[0]), ys(a[1])), (xs(b[0]), ys(b[1]))]), stroke=s.colour,
                           fill="none", stroke_width=2, stroke_dasharray="7 4" if s.dashed else None,
                           class_="fitline"))
        for batch, peak in s.points:
            body.append(el("circle", [el("title", f"{s.name}, batch {batch}: {exact(peak)} ({human(peak)})")],
                           cx=xs(batch), cy=ys(peak), r=5, fill=s.colour, stroke="#fff", stroke_width=1.5))
    if capacity is not None and cap_on_scale:
        body.append(capacity_horizontal(ys(capacity.bytes), x0, x1, capacity))
    keys = []
    for s in series:
        text = s.name
        if s.fit is not None:
            text += f": {human(s.fit.slope)}/sample + {human(s.fit.intercept)}, R² {s.fit.r2:.4f}"
        keys.append((text, s.colour))
    return join([svg(y_bottom + 46, body, title), legend(keys, dashed=[s.dashed for s in series])])
