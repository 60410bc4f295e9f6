"""Memory over the step: live bytes by category through forward, loss, backward and the optimizer step, as
a stacked step area with the peak marked.

Three inputs, one picture (:class:`StepSeries`):

- the estimate's typed moments, ``[{"phase": "backward", "label": "backward: loss", "parts": {category:
  bytes}, "total": bytes}, ...]`` (``total`` optional);
- the moments of older estimate JSON, ``{"backward: loss": bytes, ...}`` (totals only: one grey series);
- an engine's timeline, ``[{"t": 0, "phase": "forward", "module": "model.layers.0.mlp",
  "bytes_by_category": {category: bytes}}, ...]``, downsampled here to :data:`MAX_POINTS`: the first and
  last events and each bucket's highest point (so the peak survives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.report.html.axis import GUTTER, WIDTH, ByteAxis, Capacity, capacity_horizontal, legend, svg, y_axis_bytes
from memfit.report.html.figures import JsonPath, exact, figure, human
from memfit.report.html.geometry import (
    LinearScale,
    Segment,
    downsample_max,
    moment_segments,
    nice_ticks,
    step_area_polygons,
    timeline_segments,
)
from memfit.report.html.markup import Html, el, join, points
from memfit.report.html.palette import colour, label, ordered

MAX_POINTS = 600
PHASE_TINTS = {"forward": "#eef4fb", "loss": "#f6effa", "backward": "#fdf3e7", "optimizer": "#edf7ee"}
LEFT, RIGHT, TOP, PLOT_H = 70, 14, 34, 260


@dataclass(frozen=True, slots=True)
class StepSeries:
    """Segments to draw, with a label, phase and module per segment, and the JSON path of each point."""

    kind: str  # "moments" or "timeline"
    segments: tuple[Segment, ...]
    labels: tuple[str, ...]
    phases: tuple[str, ...]
    modules: tuple[str, ...]
    paths: tuple[JsonPath, ...]  # where each point's bytes are in the JSON
    dropped: int = 0  # timeline points not drawn (downsampled)
    total_paths: tuple[JsonPath | None, ...] = ()  # where each point's total is in the JSON, when it is

    @property
    def peak_index(self) -> int:
        totals = [s.total for s in self.segments]
        return max(range(len(totals)), key=lambda i: (totals[i], -i))

    @property
    def categories(self) -> list[str]:
        return ordered({k for s in self.segments for k, v in s.parts.items() if v > 0})


def _phase_of(label_text: str) -> str:
    """``"backward: last block"`` -> ``"backward"``."""
    return label_text.split(":", 1)[0].strip()


def moments_series(moments: Mapping[str, Any] | Sequence[Mapping[str, Any]], key: str = "moments") -> StepSeries:
    """Either form of the estimate's step moments: ``{label: bytes}`` or ``[{"phase", "label", "parts"}]``.

    >>> s = moments_series({"forward: loss": 10, "backward: loss": 12})
    >>> [seg.parts for seg in s.segments], s.phases, s.peak_index
    ([{'total': 10}, {'total': 12}], ('forward', 'backward'), 1)
    """
    totals: list[JsonPath | None]
    if isinstance(moments, Mapping):
        labels = list(moments)
        parts = [{"total": int(moments[k])} for k in labels]
        phases = [_phase_of(k) for k in labels]
        paths: list[JsonPath] = [(key, k) for k in labels]
        totals = list(paths)
    elif isinstance(moments, Sequence) and not isinstance(moments, str):
        labels, parts, phases, paths, totals = [], [], [], [], []
        for i, m in enumerate(moments):
            lab = str(m["label"])
            labels.append(lab)
            parts.append({str(c): int(v) for c, v in m["parts"].items()})
            phases.append(str(m.get("phase") or _phase_of(lab)))
            paths.append((key, i, "parts"))
            totals.append((key, i, "total") if "total" in m else None)
    else:
        raise MemfitError(f"'{key}' must be a mapping of label to bytes or a list of {{phase, label, parts}}")
    if not labels:
        raise MemfitError(f"'{key}' is empty: nothing to draw")
    return StepSeries(kind="moments", segments=tuple(moment_segments(parts)), labels=tuple(labels),
                      phases=tuple(phases), modules=("",) * len(labels), paths=tuple(paths), total_paths=tuple(totals))


def timeline_series(timeline: Sequence[Mapping[str, Any]], key: str = "timeline",
                    limit: int = MAX_POINTS, offset: int = 0) -> StepSeries:
    """An engine's ``timeline`` list, at most ``limit`` points (the highest of each bucket kept); ``offset``: the
    list is ``d[key][offset:]`` (its JSON paths count from there).

    >>> s = timeline_series([{"t": 0, "phase": "forward", "module": "m", "bytes_by_category": {"weights_frozen": 4}},
    ...                      {"t": 1, "phase": "backward", "module": "m", "bytes_by_category": {"activations": 6}}])
    >>> [(g.x0, g.x1) for g in s.segments], s.peak_index
    ([(0.0, 1.0), (1.0, 2.0)], 1)
    """
    if not isinstance(timeline, Sequence) or isinstance(timeline, str) or not timeline:
        raise MemfitError(f"'{key}' must be a non-empty list of {{t, phase, module, bytes_by_category}}")
    totals = [sum(int(v) for v in p["bytes_by_category"].values()) for p in timeline]
    if len(totals) > limit:  # the first and last events always (the chart spans the whole step), the rest by bucket
        keep, starts = [0], [0]
        for lo, i in bucket_highs(totals[1:-1], limit - 2):
            keep.append(i + 1)
            starts.append(lo + 1)
        keep.append(len(totals) - 1)
        starts.append(len(totals) - 1)
    else:
        keep = starts = list(range(len(totals)))
    chosen = [timeline[i] for i in keep]
    # each bucket's highest point is drawn across the whole bucket (from its first event), so a short burst
    # (the logits, alive for a few dozen of thousands of events) keeps the width of its bucket
    times = [float(timeline[i]["t"]) for i in starts]
    if any(b < a for a, b in zip(times, times[1:], strict=False)):
        raise MemfitError(f"'{key}' must be in time order (t increasing)")
    parts = [{str(c): int(v) for c, v in p["bytes_by_category"].items()} for p in chosen]
    segs = timeline_segments(times, parts)
    return StepSeries(kind="timeline", segments=tuple(segs),
                      labels=tuple(f"{p.get('phase', '')}: {p.get('module', '')}" for p in chosen),
                      phases=tuple(str(p.get("phase", "")) for p in chosen),
                      modules=tuple(str(p.get("module", "")) for p in chosen),
                      paths=tuple((key, i + offset, "bytes_by_category") for i in keep),
                      dropped=len(timeline) - len(keep))


ZOOM_AROUND = 40  # timeline points either side of the peak in the close-up


def peak_zoom(timeline: Sequence[Mapping[str, Any]], key: str = "timeline",
              around: int = ZOOM_AROUND) -> StepSeries | None:
    """The points around the timeline's highest one, every one drawn, for a close-up: a burst that lives for a
    few dozen of thousands of events (the logits and their gradient) is a sliver on the whole step's axis.
    None when the whole timeline is short enough to read already.

    >>> tl = [{"t": i, "phase": "forward", "bytes_by_category": {"activations": 100 - abs(i - 300)}}
    ...       for i in range(400)]
    >>> z = peak_zoom(tl, around=5)
    >>> (len(z.segments), z.paths[0], z.segments[z.peak_index].total)
    (11, ('timeline', 295, 'bytes_by_category'), 100)
    """
    if len(timeline) <= 4 * around:
        return None
    totals = [sum(int(v) for v in p["bytes_by_category"].values()) for p in timeline]
    peak = max(range(len(totals)), key=lambda i: (totals[i], -i))
    lo, hi = max(0, peak - around), min(len(timeline), peak + around + 1)
    return timeline_series(timeline[lo:hi], key, limit=hi - lo, offset=lo)


def bucket_highs(totals: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """``(first index, index of the highest)`` of each bucket :func:`downsample_max` cuts.

    >>> bucket_highs([1, 5, 2, 2, 9, 1, 3, 4], 3)
    [(0, 1), (2, 4), (5, 7)]
    """
    n = len(totals)
    if n <= limit:
        return [(i, i) for i in range(n)]
    highs = downsample_max(totals, limit)
    starts = [b * n // limit for b in range(limit) if (b + 1) * n // limit > b * n // limit]
    return list(zip(starts, highs, strict=True))


def phase_runs(phases: Sequence[str]) -> list[tuple[str, int, int]]:
    """Contiguous runs of one phase: ``(phase, first index, last index + 1)``.

    >>> phase_runs(["forward", "forward", "backward", "optimizer"])
    [('forward', 0, 2), ('backward', 2, 3), ('optimizer', 3, 4)]
    """
    runs: list[tuple[str, int, int]] = []
    for i, p in enumerate(phases):
        if runs and runs[-1][0] == p:
            runs[-1] = (p, runs[-1][1], i + 1)
        else:
            runs.append((p, i, i + 1))
    return runs


def step_chart(series: StepSeries, capacity: Capacity | None = None, title: str = "memory over the step") -> Html:
    """The stacked step area, phase bands, the peak marked, a capacity line when it is on the scale."""
    segs = series.segments
    cats = series.categories or ["total"]
    peak_i = series.peak_index
    peak = segs[peak_i].total
    cap_on_scale = capacity is not None and capacity.bytes <= 1.6 * peak
    axis = ByteAxis.fit(max(peak, capacity.bytes if capacity and cap_on_scale else 0))
    x0, x1 = LEFT, WIDTH - (GUTTER if cap_on_scale else RIGHT)
    xs = LinearScale(segs[0].x0, segs[-1].x1, x0, x1)
    y_bottom = TOP + PLOT_H
    ys = LinearScale(0, axis.top, y_bottom, TOP)
    body = []
    for phase, a, b in phase_runs(series.phases):  # phase bands behind the area, named on top
        left, right = xs(segs[a].x0), xs(segs[b - 1].x1)
        body.append(el("rect", [el("title", phase)], x=left, y=TOP - 20, width=right - left, height=PLOT_H + 20,
                       fill=PHASE_TINTS.get(phase, "#f3f4f6")))
        if right - left > 46:
            body.append(el("text", phase, x=(left + right) / 2, y=TOP - 6, text_anchor="middle", class_="phase"))
    body.append(y_axis_bytes(axis, ys, x0, x1))
    polys = step_area_polygons(segs, cats, xs, ys)
    for cat, poly in polys.items():
        body.append(el("polygon", [el("title", label(cat))], points=points(poly), fill=colour(cat),
                       class_="area"))
    # hover: one transparent column per segment with the exact bytes in its tooltip
    hover = []
    for seg, lab in zip(segs, series.labels, strict=True):
        tip = f"{lab}: {exact(seg.total)} ({human(seg.total)})" + "".join(
            f"\n  {label(c)}: {exact(v)}" for c, v in seg.parts.items() if v > 0 and c != "total")
        hover.append(el("rect", [el("title", tip)], x=xs(seg.x0), y=TOP, width=max(xs(seg.x1) - xs(seg.x0), 0.5),
                        height=PLOT_H, class_="hover"))
    body.append(el("g", hover))
    if series.kind == "moments":  # the moment under each column, two lines: phase on top is in the band
        for seg, lab in zip(segs, series.labels, strict=True):
            what = lab.split(":", 1)[1].strip() if ":" in lab else lab
            words = _wrap(what, max(int((xs(seg.x1) - xs(seg.x0)) / 6.6), 6))
            body.append(el("text", [el("tspan", w, x=(xs(seg.x0) + xs(seg.x1)) / 2, dy=0 if i == 0 else 14)
                                    for i, w in enumerate(words)],
                           x=(xs(seg.x0) + xs(seg.x1)) / 2, y=y_bottom + 16, text_anchor="middle", class_="tick"))
        bottom = y_bottom + 16 + 14 * 2 + 6
    else:
        for t in nice_ticks(segs[0].x0, segs[-1].x1, 6):
            body.append(el("text", f"{t:g}", x=xs(t), y=y_bottom + 16, text_anchor="middle", class_="tick"))
        body.append(el("text", "t (allocation events)", x=(x0 + x1) / 2, y=y_bottom + 34, text_anchor="middle",
                       class_="axislabel"))
        bottom = y_bottom + 44
    if capacity is not None and cap_on_scale:
        body.append(capacity_horizontal(ys(capacity.bytes), x0, x1, capacity))
    px = (xs(segs[peak_i].x0) + xs(segs[peak_i].x1)) / 2
    py = ys(peak)
    right_side = px < (x0 + x1) / 2
    body.append(el("g", [
        el("title", f"peak: {series.labels[peak_i]}, {exact(peak)}"),
        el("line", x1=px, x2=px, y1=py, y2=y_bottom, class_="peakline"),
        el("circle", cx=px, cy=py, r=5, class_="peakdot"),
        el("text", f"peak {human(peak)}", x=px + (9 if right_side else -9), y=py + 4.5 if py > TOP + 20 else py + 18,
           text_anchor="start" if right_side else "end", class_="peaklabel"),
    ]))
    picture = svg(bottom, body, title)
    keys = [(label(c), colour(c)) for c in cats]
    lines = [(capacity.name, "#c62828")] if capacity is not None and cap_on_scale else []
    parts = [picture, legend(keys, line=lines)]
    if capacity is not None and not cap_on_scale:
        parts.append(el("p", f"{capacity.text()} is off this scale (more than 1.6 x the peak).", class_="note"))
    if series.dropped:
        parts.append(el("p", f"{len(segs):,} of {len(segs) + series.dropped:,} timeline points drawn (the highest "
                             "of each bucket, so the peak is among them).", class_="note"))
    return join(parts)


def _wrap(text: str, width: int) -> list[str]:
    """At most two lines of about ``width`` characters (the second one clipped)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    if len(lines) > 2:
        lines = [lines[0], " ".join(lines[1:])]
    return [lines[0], *([lines[1][: width - 1] + "…" if len(lines[1]) > width else lines[1]] if len(lines) > 1 else [])]


def series_rows(series: StepSeries) -> list[tuple[str, str, Html, Html]]:
    """Table rows, one per point: label, phase, exact bytes, GiB (each tied to its JSON path)."""
    rows = []
    totals = series.total_paths or (None,) * len(series.paths)
    for seg, lab, phase, total in zip(series.segments, series.labels, series.phases, totals, strict=True):
        if total is not None:
            rows.append((lab, phase, figure(seg.total, total, "B"), figure(seg.total, total, "GiB")))
        else:
            rows.append((lab, phase, Html(el("span", exact(seg.total), class_="sum")),
                         Html(el("span", human(seg.total), class_="sum"))))
    return rows

