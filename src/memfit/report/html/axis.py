"""Axes, grid lines, the capacity line and legends shared by the charts (SVG and HTML pieces)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memfit.report.html.figures import binary_unit, human
from memfit.report.html.geometry import LinearScale, nice_max, nice_ticks
from memfit.report.html.markup import Html, el, join
from memfit.report.html.palette import CAPACITY_COLOUR

WIDTH = 640  # viewBox width of every chart; the page scales it to the column (SVG viewBox)
GUTTER = 92  # right of the plot: the labels of horizontal capacity lines


@dataclass(frozen=True, slots=True)
class Capacity:
    """A line to compare against: the GPU's memory, a budget, or a memory limit."""

    name: str
    bytes: int

    def text(self) -> str:
        return f"{self.name}: {human(self.bytes)}"


@dataclass(frozen=True, slots=True)
class ByteAxis:
    """A byte axis from 0: its top in bytes, the unit its ticks are written in, and the tick values."""

    top: int
    unit: str
    factor: int
    ticks: tuple[int, ...]

    @classmethod
    def fit(cls, high: float, target: int = 5) -> ByteAxis:
        """Round ``high`` bytes up to a nice multiple in the binary unit that suits it.

        >>> a = ByteAxis.fit(73_917_997_060)  # 68.84 GiB -> axis 0..80 GiB by 20
        >>> a.unit, a.top // 2**30, [t // 2**30 for t in a.ticks]
        ('GiB', 80, [0, 20, 40, 60, 80])
        """
        unit, factor = binary_unit(high)
        top_units = nice_max(high / factor, target)
        ticks = nice_ticks(0, top_units, target)
        return cls(top=round(top_units * factor), unit=unit, factor=factor,
                   ticks=tuple(round(t * factor) for t in ticks))

    def label(self, value: int) -> str:
        """A tick label: ``40 GiB``, ``2.5 MiB``."""
        v = value / self.factor
        text = f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"
        return f"{text} {self.unit}"


def x_axis_bytes(axis: ByteAxis, xs: LinearScale, y_top: float, y_bottom: float) -> Html:
    """Vertical grid lines at each tick of a horizontal byte axis, labels under ``y_bottom``."""
    parts = []
    for t in axis.ticks:
        x = xs(t)
        parts.append(el("line", x1=x, x2=x, y1=y_top, y2=y_bottom, class_="grid"))
        parts.append(el("text", axis.label(t), x=x, y=y_bottom + 16, text_anchor="middle", class_="tick"))
    return join(parts)


def y_axis_bytes(axis: ByteAxis, ys: LinearScale, x_left: float, x_right: float) -> Html:
    """Horizontal grid lines at each tick of a vertical byte axis, labels left of ``x_left``."""
    parts = []
    for t in axis.ticks:
        y = ys(t)
        parts.append(el("line", x1=x_left, x2=x_right, y1=y, y2=y, class_="grid"))
        parts.append(el("text", axis.label(t), x=x_left - 6, y=y + 4, text_anchor="end", class_="tick"))
    return join(parts)


def capacity_vertical(x: float, y_top: float, y_bottom: float, text: str, *, anchor_right: bool) -> Html:
    """The GPU's capacity as a dashed vertical line with its label above it."""
    return el("g", [
        el("title", text),
        el("line", x1=x, x2=x, y1=y_top - 4, y2=y_bottom, stroke=CAPACITY_COLOUR, stroke_width=2,
           stroke_dasharray="6 4"),
        el("text", text, x=x + (-4 if anchor_right else 4), y=y_top - 8,
           text_anchor="end" if anchor_right else "start", class_="cap"),
    ], class_="capacity")


def capacity_horizontal(y: float, x_left: float, x_right: float, cap: Capacity, dy: float = 0) -> Html:
    """A capacity (or budget) as a dashed horizontal line, named in the gutter right of ``x_right`` on two
    lines (name, size), shifted by ``dy`` when two lines are close."""
    return el("g", [
        el("title", cap.text()),
        el("line", x1=x_left, x2=x_right, y1=y, y2=y, stroke=CAPACITY_COLOUR, stroke_width=2,
           stroke_dasharray="6 4"),
        el("text", [el("tspan", cap.name, x=x_right + 6, dy=0), el("tspan", human(cap.bytes), x=x_right + 6, dy=14)],
           x=x_right + 6, y=y - 3 + dy, class_="cap"),
    ], class_="capacity")


def svg(height: float, body: Iterable[str], title: str) -> Html:
    """The chart element: a viewBox of :data:`WIDTH` x ``height`` that scales to the column width."""
    return el("svg", [el("title", title), *body], xmlns="http://www.w3.org/2000/svg",
              viewBox=f"0 0 {WIDTH} {height:.0f}", class_="chart", role="img", aria_label=title)


def legend(items: Sequence[tuple[str, str]], *, line: Sequence[tuple[str, str]] = (),
           dashed: Sequence[bool] = ()) -> Html:
    """An HTML legend that wraps on narrow screens: colour swatches (a dashed line where ``dashed`` says so),
    then dashed-line keys."""
    parts = [el("span", [el("i", "", class_="sw line" if i < len(dashed) and dashed[i] else "sw",
                            style=f"border-color:{c}" if i < len(dashed) and dashed[i] else f"background:{c}"),
                         name], class_="key")
             for i, (name, c) in enumerate(items)]
    parts += [el("span", [el("i", "", class_="sw line", style=f"border-color:{c}"), name], class_="key")
              for name, c in line]
    return el("div", parts, class_="legend")
