"""The page for ``memfit lab --json``: the verdicts at a glance, then one section per rep with the lesson's claim,
what was measured, the verdict, the command that reproduces it, and the rep's picture (the batch sweep with its
least-squares lines, activations against depth per checkpointing mode, the peak against sequence length per
attention kernel, the worked example's bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.report.html.bars import Bar, column_chart
from memfit.report.html.markup import Html, el
from memfit.report.html.page import kpi, page, section
from memfit.report.html.pages._common import require
from memfit.report.html.palette import BAD, GOOD, SERIES
from memfit.report.html.sweep import LineFit, SweepSeries, sweep_chart
from memfit.report.lab import lab_heading

_CLASS = {"holds": "ok", "does not hold here": "bad"}


def _series(name: str, colour: str, points: Mapping[Any, Any], dashed: bool = False) -> SweepSeries:
    return SweepSeries(name=name, colour=colour, points=sorted((int(k), int(v)) for k, v in points.items()),
                       dashed=dashed)


def _picture(r: Mapping[str, Any]) -> Html | None:
    f = r.get("figures") or {}
    n = r["number"]
    if n == 1 and f.get("peaks"):
        pts = sorted((int(k), int(v)) for k, v in f["peaks"].items())
        slope = float(f["slope_bytes_per_sample"])
        mean_b = sum(b for b, _ in pts) / len(pts)
        mean_p = sum(p for _, p in pts) / len(pts)
        fit = LineFit(slope=slope, intercept=mean_p - slope * mean_b, r2=float(f["r2"]))
        return sweep_chart([SweepSeries(name="peak, no checkpointing", colour=SERIES[0], points=pts, fit=fit),
                            _series("activations", SERIES[1], f["activations"], dashed=True)])
    if n == 4 and f.get("activations"):
        names = {"none": "no checkpointing", "full": "per layer", "sqrt": "sqrt(L) segments"}
        return sweep_chart([_series(names.get(m, m), SERIES[i], pts, dashed=m != "none")
                            for i, (m, pts) in enumerate(f["activations"].items())],
                           title="activations at the peak against depth", x_title="decoder layers")
    if n == 5 and f.get("peaks"):
        return sweep_chart([_series(k, SERIES[i], pts, dashed=k != "eager") for i, (k, pts) in enumerate(f["peaks"]
                                                                                                  .items())],
                           title="peak against sequence length", x_title="sequence length (tokens)")
    if n == 7 and f.get("rule_bytes"):
        bars = [Bar("rule L*b*s*h*20", int(f["rule_bytes"])), Bar("estimate: activations",
                                                                  int(f["estimate_activations"])),
                Bar("trace: activations", int(f["trace_activations"])), Bar("frozen weights", int(f["frozen_weights"])),
                Bar("adapter state", int(f["adapter_state"]))]
        return column_chart(bars, "the worked example, bytes")
    return None


def lab_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "reps", what="lab")
    reps = list(d["reps"])
    counts: dict[str, int] = {}
    for r in reps:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    kpis = [kpi(v, str(c), "", _CLASS.get(v)) for v, c in counts.items()]
    kpis.append(kpi("lab time", f"{float(d['seconds']):.0f} s", str(d.get("device", ""))))
    sections = []
    for r in reps:
        colour = GOOD if r["verdict"] == "holds" else BAD if r["verdict"] == "does not hold here" else "#b8860b"
        body: list[str] = [
            el("p", [el("strong", "The lesson: "), r["claim"]]),
            el("p", [el("strong", f"Measured ({r['how']}, {float(r['seconds']):.0f} s): "), r["measured"]]),
            el("p", [el("strong", "Verdict: "), el("span", r["verdict"], style=f"color:{colour};font-weight:600")]),
            el("p", [el("strong", "Reproduce: "), el("code", r["command"])]),
        ]
        picture = _picture(r)
        if picture is not None:
            body.append(picture)
        sections.append(section(f"Rep {r['number']}: {r['title']}", *body, id_=f"rep{r['number']}"))
    return page(command="lab", title=f"memfit lab: {d.get('model', '?')}", subtitle=[lab_heading(d)], kpis=kpis,
                sections=sections, source=source)
