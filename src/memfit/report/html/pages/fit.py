"""The page for ``memfit fit --json``: the path of remedies as a waterfall (each one's saving and its cost)
against the budget and the GPU, and the cheapest configuration of the search beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.report.fit import need_text, seq_rule_text, skip_reason, step_cost
from memfit.report.html.axis import Capacity
from memfit.report.html.figures import figure, human
from memfit.report.html.markup import Html, el
from memfit.report.html.page import kpi, page, section, table
from memfit.report.html.pages._common import gpu_capacity, require, spec_summary
from memfit.report.html.waterfall import Remedy, waterfall_chart


def spec_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``"batch 4->1, grad_accum 1->4"``: the spec fields that differ (lists joined by commas).

    >>> spec_changes({"batch": 4, "grad_accum": 1, "rank": 8}, {"batch": 1, "grad_accum": 4, "rank": 8})
    'batch 4->1, grad_accum 1->4'
    """
    parts = []
    for key in after:
        old, new = before.get(key), after.get(key)
        if old != new:
            o = ",".join(map(str, old)) if isinstance(old, list) else old
            n = ",".join(map(str, new)) if isinstance(new, list) else new
            parts.append(f"{key} {o}->{n}")
    return ", ".join(parts) or "(no change)"


def _setup(step: Mapping[str, Any]) -> dict[str, Any]:
    """A step's spec plus the sharding and packing the search also changes."""
    spec = step.get("spec") or {}
    return {**spec, "sharding": step.get("sharding", spec.get("sharding", "none")),
            "packing": step.get("packing", False)}


def _cost(step: Mapping[str, Any], d: Mapping[str, Any]) -> str:
    """A step's cost in words, written from its facts as the terminal report writes it (a JSON written before
    the advisor returned data carries its own sentence)."""
    if step.get("cost"):
        return str(step["cost"])
    if step.get("facts") is None:
        return ""
    source = str((d.get("time_model") or {}).get("source", ""))
    return step_cost(str(step["action"]), step["facts"], float(step.get("time_factor") or 1.0), time_source=source)


def fit_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "steps", "initial", "budget_bytes", what="fit")
    steps = list(d["steps"])
    start = int(d["initial"]["peak_bytes"])
    budget = int(d["budget_bytes"])
    gpu = gpu_capacity(d.get("gpu"))
    per = " per GPU" if int(d.get("gpus") or 1) > 1 else ""
    headroom = d.get("headroom") or {}
    room = (f"{float(headroom['fraction']):.0%}" if headroom.get("fraction") is not None
            else human(int(headroom.get("bytes") or 0)))
    final = d.get("final") or {}
    final_peak = int(final.get("peak_bytes", steps[-1]["peak_bytes"] if steps else start))
    cheapest = d.get("cheapest") or {}
    if d.get("fits_initially"):
        verdict, cls = f"fits as given, {human(budget - start)} to spare", "ok"
    elif d.get("fits"):
        verdict, cls = f"fits after {len(steps)} step{'s' if len(steps) != 1 else ''}", "ok"
    else:
        verdict, cls = "nothing on the path fits", "bad"
    kpis = [kpi("verdict", verdict, "", cls),
            kpi("peak as given", figure(start, ["initial", "peak_bytes"], "GiB"), f"{start:,} B"),
            kpi("peak of the plan", figure(final_peak, ["final", "peak_bytes"], "GiB") if final else human(final_peak),
                f"{final_peak:,} B"),
            kpi("budget" + per, figure(budget, ["budget_bytes"], "GiB"),
                f"{gpu.text() if gpu else 'GPU'} less {room} headroom")]
    cost = final.get("cost") or {}
    if cost.get("time_factor") is not None:
        kpis.append(kpi("step time of the plan", figure(cost["time_factor"], ["final", "cost", "time_factor"], "x"),
                        f"gives up {cost.get('gives_up', '?')}"))
    remedies = [Remedy(str(s["action"]), int(s["peak_bytes"]), s.get("time_factor"), _cost(s, d)) for s in steps]
    chart = waterfall_chart(start, remedies, budget=Capacity("budget" + per, budget), capacity=gpu,
                            cheapest=int(cheapest["peak_bytes"]) if cheapest.get("fits") and
                            cheapest.get("peak_bytes") is not None else None,
                            title="peak after each remedy on the ordered path")
    rows = [["0", "as given", "", figure(start, ["initial", "peak_bytes"], "B"), "", el("span", "yes", class_="ok")
             if d.get("fits_initially") else el("span", "no", class_="bad"), ""]]
    previous = _setup(d["initial"])
    for i, s in enumerate(steps):
        now = _setup(s)
        rows.append([str(i + 1), str(s["action"]), spec_changes(previous, now),
                     figure(s["peak_bytes"], ["steps", i, "peak_bytes"], "B"),
                     figure(s["saved_bytes"], ["steps", i, "saved_bytes"], "B"),
                     el("span", "yes", class_="ok") if s.get("fits") else el("span", "no", class_="bad"),
                     _cost(s, d)])
        previous = now
    sections = [section(
        "The fit path",
        chart,
        table(["#", "remedy", "change", "peak bytes", "saved bytes", "fits", "cost"], rows, numeric=(0, 3, 4)),
        lead="The lesson's order of remedies, each applied on top of the last until the estimated peak fits the "
             "budget: the green bars are what each one saves, the text under it what it costs in step time.",
    )]
    sections.append(_cheapest(d, cheapest))
    notes = _notes(d)
    if notes:
        sections.append(section("Notes", *notes))
    return page(command="fit", title=f"memfit fit: {d.get('model', '?')} on {gpu.name if gpu else 'a GPU'}",
                subtitle=[f"as given: {spec_summary(d['initial'].get('spec'))}"], kpis=kpis, sections=sections,
                source=source)


def _cheapest(d: Mapping[str, Any], c: Mapping[str, Any]) -> Html:
    if not c or not c.get("candidates"):
        return section("Cheapest overall", el("p", "The search was skipped (--no-search)."))
    if not c.get("fits") or c.get("peak_bytes") is None:
        return section("Cheapest overall", el("p", f"None of {int(c['candidates']):,} configurations fits."))
    changes = c.get("changes") or {}
    rows = [[k, ",".join(map(str, v[0])) if isinstance(v[0], list) else str(v[0]),
             ",".join(map(str, v[1])) if isinstance(v[1], list) else str(v[1])] for k, v in changes.items()]
    cost = c.get("cost") or {}
    body: list[Html] = [el("p", [
        "Of ", figure(c.get("candidates"), ["cheapest", "candidates"], ""), " configurations (",
        figure(c.get("evaluated"), ["cheapest", "evaluated"], ""), " estimated), the cheapest that fits peaks at ",
        figure(c["peak_bytes"], ["cheapest", "peak_bytes"], "GiB"), " (", figure(c["peak_bytes"], ["cheapest",
                                                                                              "peak_bytes"], "B"),
        f"); it gives up {cost.get('gives_up', '?')}, step time ",
        figure(cost.get("time_factor"), ["cheapest", "cost", "time_factor"], "x"), "."])]
    if rows:
        body.append(table(["setting", "as given", "cheapest"], rows))
    if c.get("needs"):
        spec = c.get("spec") or {}
        body.append(el("p", "Needs: " + "; ".join(need_text(str(n), spec) for n in c["needs"]) + ".", class_="note"))
    return section("Cheapest overall", *body)


def _notes(d: Mapping[str, Any]) -> list[Html]:
    out: list[Html] = []
    key = "rank_reduction" if d.get("rank_reduction") else "rank_lesson"  # the key of older JSON
    r = d.get(key)
    if r:
        out.append(el("p", [
            f"Why rank comes last: rank {r['from_rank']} -> {r['to_rank']} alone saves ",
            figure(r["saved_bytes"], [key, "saved_bytes"], "B"), " (",
            figure(r["saved_bytes"], [key, "saved_bytes"], "GB", 3), ") against ",
            figure(r["activation_bytes"], [key, "activation_bytes"], "GiB"),
            " of activations: the peak would be ", figure(r["peak_after_bytes"], [key, "peak_after_bytes"], "GiB"),
            ", which " + ("fits." if r.get("fits_after") else "still does not fit.")]))
    skipped = d.get("skipped") or []
    if skipped:
        out.append(el("p", "Skipped: " + "; ".join(
            f"{s['action']} ({skip_reason(str(s['action']), str(s['reason']), s.get('facts') or {})})"
            if "facts" in s else f"{s['action']} ({s['reason']})" for s in skipped) + ".", class_="note"))
    small = d.get("smallest_gpu") or {}
    for key, what in (("initial", "the run as given"), ("final", "the plan")):
        g = small.get(key)
        if g:
            out.append(el("p", f"Smallest GPU in memfit's table for {what}: {g['name']} ({human(int(g['bytes']))}).",
                          class_="note"))
    tm = d.get("time_model") or {}
    if tm:
        out.append(el("p", f"Checkpointing time factor x{float(tm.get('checkpoint_factor', 0)):.2f} "
                           f"({tm.get('source', '')}).", class_="note"))
    rule = d.get("seq_rule")
    text = seq_rule_text(rule) if rule in ("fallback", "data") else rule  # older JSON: the sentence itself
    if text:
        out.append(el("p", f"Sequence length: {text}.", class_="note"))
    return out
