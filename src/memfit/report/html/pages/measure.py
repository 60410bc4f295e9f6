"""The page for ``memfit measure --json``: every measured point by category, the batch sweep with its
least-squares lines and R^2, the checkpointing comparison side by side, the largest batch that fits.

JSON written before the runtime split names the lines ``fit`` / ``fits`` and carries a ``verdict`` sentence
per trade; both forms are read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.report.html.axis import Capacity
from memfit.report.html.budget import BarRow, BudgetChart, budget_chart
from memfit.report.html.figures import figure, human
from memfit.report.html.markup import Html, el
from memfit.report.html.page import kpi, page, section, table
from memfit.report.html.pages._common import gpu_capacity, recorded_timeline, require, spec_summary
from memfit.report.html.palette import SERIES
from memfit.report.html.sweep import LineFit, SweepSeries, sweep_chart
from memfit.report.measure import trade_verdict


def _point(r: Mapping[str, Any]) -> str:
    return f"b{r['batch']} s{r['seq']} {r['checkpointing']}"


def measure_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "runs", what="measure")
    spec = d.get("spec") or {}
    runs = list(d["runs"])
    cap: Capacity | None = None
    if d.get("memory_limit"):
        cap = Capacity("memory limit", int(d["memory_limit"]))
    else:
        cap = gpu_capacity(None, None, spec)
    ok = [(i, r) for i, r in enumerate(runs) if r.get("fits") and r.get("peak_bytes") is not None]
    kpis = [kpi("points measured", f"{len(runs)}", f"{len(ok)} fit, {len(runs) - len(ok)} out of memory"),
            kpi("device", str(d.get("device", "?")), str(d.get("model", "")))]
    if ok:
        i, top = max(ok, key=lambda ir: int(ir[1]["peak_bytes"]))
        kpis.append(kpi("largest peak", figure(top["peak_bytes"], ["runs", i, "peak_bytes"], "MiB" if
                                               int(top["peak_bytes"]) < 2**30 else "GiB"), _point(top)))
    head_key = "peak_vs_batch_headline" if "peak_vs_batch_headline" in d else "fit"
    head = d.get(head_key)
    if head:
        slope = head["slope_bytes_per_sample"]
        kpis.append(kpi("peak per extra sample", figure(slope, [head_key, "slope_bytes_per_sample"], _unit(slope)),
                        f"R² {head['r2']:.4f} at seq {head['seq']}, checkpointing {head['checkpointing']}"))
    trades = d.get("checkpointing_trade") or []
    if trades:
        t = trades[0]
        kpis.append(kpi("checkpointing saves", figure(t["fraction_saved"], ["checkpointing_trade", 0, "fraction_saved"],
                                                      "%", 1), f"for x{t['slowdown']:.2f} time at b{t['batch']} "
                                                                  f"s{t['seq']}"))
    sections = []
    lines_key = "peak_vs_batch" if "peak_vs_batch" in d else "fits"
    if d.get(lines_key):
        sections.append(_sweep(runs, d[lines_key], cap, lines_key))
    if trades:
        sections.append(_trades(runs, trades, cap))
    sections.append(_points(runs, ok, cap))
    if d.get("max_batch"):
        sections.append(_max_batch(d["max_batch"]))
    if d.get("timeline"):
        run = d.get("timeline_run") or {}
        which = (f" of b{run['batch']} s{run['seq']} {run['checkpointing']}, the highest peak" if run else "")
        sections.insert(0, recorded_timeline(d, cap, title=f"live bytes through the tracked steps{which}"))
    return page(command="measure", title=f"memfit measure: {d.get('model', '?')}",
                subtitle=[spec_summary({**spec, "batch": "/".join(sorted({str(r['batch']) for r in runs}, key=int)),
                                        "seq": "/".join(sorted({str(r['seq']) for r in runs}, key=int)),
                                        "checkpointing": "/".join(dict.fromkeys(r["checkpointing"] for r in runs))})],
                kpis=kpis, sections=sections, source=source)


def _unit(n: float) -> str:
    return "GiB" if abs(n) >= 2**30 else "MiB" if abs(n) >= 2**20 else "KiB" if abs(n) >= 1024 else "B"


def _points(runs: list[Mapping[str, Any]], ok: list[tuple[int, Mapping[str, Any]]], cap: Capacity | None) -> Html:
    rows = [BarRow(_point(r), {k: int(v) for k, v in (r.get("by_category") or {}).items()},
                   reserved_extra=max(int(r.get("reserved_bytes") or 0) - int(r["peak_bytes"]), 0),
                   note=f"{r['step_seconds']:.2f} s/step" if r.get("step_seconds") else "") for _, r in ok]
    body: list[Html] = []
    if rows:
        body.append(budget_chart(BudgetChart(rows, cap, "measured peak of each point by category")))
    table_rows = []
    for i, r in enumerate(runs):
        fits = r.get("fits")
        table_rows.append([
            str(r["batch"]), str(r["seq"]), str(r["checkpointing"]),
            el("span", "yes", class_="ok") if fits else el("span", "out of memory", class_="bad"),
            figure(r.get("peak_bytes"), ["runs", i, "peak_bytes"], "B"),
            figure(r.get("estimate_bytes"), ["runs", i, "estimate_bytes"], "B"),
            figure(r.get("ratio"), ["runs", i, "ratio"], "", 4),
            figure(r.get("step_seconds"), ["runs", i, "step_seconds"], "", 3),
            str(r.get("peak_phase") or ""),
        ])
    body.append(table(["batch", "seq", "checkpointing", "fits", "peak bytes", "estimate bytes", "measured / "
                       "estimate", "s/step", "peak phase"], table_rows, numeric=(0, 1, 4, 5, 6, 7)))
    return section("Every measured point", *body,
                   lead="Peak bytes alive by category at each (batch, sequence, checkpointing) point, each in a "
                        "fresh process" + (f", against the {cap.text()}" if cap else "") + ".")


def _sweep(runs: list[Mapping[str, Any]], lines: list[Mapping[str, Any]], cap: Capacity | None,
           json_key: str) -> Html:
    groups: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for r in runs:
        if r.get("fits") and r.get("peak_bytes") is not None:
            groups.setdefault((int(r["seq"]), str(r["checkpointing"])), []).append((int(r["batch"]),
                                                                                   int(r["peak_bytes"])))
    by_key = {(int(f["seq"]), str(f["checkpointing"])): f for f in lines}
    seq_colour = {seq: SERIES[n % len(SERIES)] for n, seq in enumerate(sorted({k[0] for k in groups}))}
    series = []
    for key, pts in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "none")):
        f = by_key.get(key)
        lf = LineFit(float(f["slope_bytes_per_sample"]), float(f["intercept_bytes"]), float(f["r2"])) if f else None
        series.append(SweepSeries(f"seq {key[0]}, checkpointing {key[1]}", seq_colour[key[0]], sorted(pts), lf,
                                  dashed=key[1] != "none"))
    rows = []
    for i, f in enumerate(lines):
        rows.append([str(f["seq"]), str(f["checkpointing"]), ", ".join(map(str, f.get("batches") or [])),
                     figure(f["slope_bytes_per_sample"], [json_key, i, "slope_bytes_per_sample"], "B"),
                     figure(f["intercept_bytes"], [json_key, i, "intercept_bytes"], "B"),
                     figure(f["r2"], [json_key, i, "r2"], "", 6),
                     figure(f.get("bytes_per_layer_token_hidden"), [json_key, i, "bytes_per_layer_token_hidden"], "",
                            2)])
    return section(
        "Peak against micro-batch, with the linear fit",
        sweep_chart(series, cap, "measured peak against micro-batch, least-squares lines"),
        table(["seq", "checkpointing", "batches", "slope (B per sample)", "intercept (B)", "R²",
               "B per layer·token·hidden"], rows, numeric=(0, 3, 4, 5, 6)),
        lead="The peak grows linearly with the micro-batch: the slope is what one more sample costs, the intercept "
             "what the run costs before any data (weights, optimizer). The lesson's constant is 20 B per "
             "layer·token·hidden.",
    )


def _trades(runs: list[Mapping[str, Any]], trades: list[Mapping[str, Any]], cap: Capacity | None) -> Html:
    index = {(int(r["batch"]), int(r["seq"]), str(r["checkpointing"])): r for r in runs}
    bars = []
    gaps = set()
    for t in trades:
        for mode, secs in (("none", t["seconds_without"]), ("full", t["seconds_with"])):
            r = index.get((int(t["batch"]), int(t["seq"]), mode))
            parts = (r or {}).get("by_category") or {"total": int(t["peak_without" if mode == "none" else "peak_with"])}
            bars.append(BarRow(f"b{t['batch']} s{t['seq']}, {'no' if mode == 'none' else 'full'} checkpointing",
                               {k: int(v) for k, v in parts.items()}, note=f"{float(secs):.2f} s/step"))
        gaps.add(len(bars) - 1)
    rows = []
    for i, t in enumerate(trades):
        p: list[str | int] = ["checkpointing_trade", i]
        rows.append([f"{t['batch']} x {t['seq']}", figure(t["peak_without"], [*p, "peak_without"], "B"),
                     figure(t["peak_with"], [*p, "peak_with"], "B"), figure(t["saved_bytes"], [*p, "saved_bytes"], "B"),
                     figure(t["fraction_saved"], [*p, "fraction_saved"], "%", 1),
                     figure(t["slowdown"], [*p, "slowdown"], "x", 2), _verdict(t)])
    return section(
        "Checkpointing: memory saved against time lost",
        budget_chart(BudgetChart(bars, cap, "each point without and with full checkpointing",
                                 group_gap_after=frozenset(gaps))),
        table(["batch x seq", "peak without", "peak with", "saved", "saved %", "time", "verdict"], rows,
              numeric=(1, 2, 3, 4, 5)),
        lead="The same point measured without and with full activation checkpointing, side by side: the bytes it "
             "saves and the time per step it costs.",
    )


def _verdict(t: Mapping[str, Any]) -> str:
    if "advice" in t:
        return trade_verdict(float(t["fraction_saved"]), float(t["slowdown"]), str(t["advice"]))
    return str(t.get("verdict", ""))


def _max_batch(m: Mapping[str, Any]) -> Html:
    rows = [[str(p["batch"]), el("span", "fits", class_="ok") if p.get("fits") else el("span", "out of memory",
                                                                                        class_="bad"),
             figure(p.get("peak_bytes"), ["max_batch", "probes", i, "peak_bytes"], "B")]
            for i, p in enumerate(m.get("probes") or [])]
    return section(
        "The largest micro-batch that fits",
        el("p", ["At seq ", str(m.get("seq")), f", checkpointing {m.get('checkpointing')}, the largest micro-batch "
                 "within ", figure(m.get("limit_bytes"), ["max_batch", "limit_bytes"], "B"),
                 f" ({human(int(m.get('limit_bytes') or 0))}) is ",
                 figure(m.get("max_batch"), ["max_batch", "max_batch"], ""), "."]),
        table(["batch", "result", "peak bytes"], rows, numeric=(0, 2), caption="bisection probes, in order"),
    )
