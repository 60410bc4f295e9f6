"""The page for ``memfit lengths --json``: the length histogram and its CDF with p95, the recommended
sequence length and what it truncates, and the padding waste of random / grouped / packed batches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.report.html.figures import figure
from memfit.report.html.histogram import P95_COLOUR, Marker, cdf_points, histogram_chart
from memfit.report.html.markup import Html, el
from memfit.report.html.padding import PaddingRow, padding_chart
from memfit.report.html.page import kpi, page, section, table
from memfit.report.html.pages._common import require
from memfit.report.html.palette import GOOD

SEQ_COLOUR = "#59636e"
STRATEGY_NAMES = {"random": "random order", "grouped": "grouped by length", "packed": "packed"}


def percentile_cdf(d: Mapping[str, Any]) -> list[tuple[float, float]]:
    """A coarse CDF from the summary alone (older JSON without a histogram): min at 0, each ``pNN`` at NN%,
    max at 100%.

    >>> percentile_cdf({"min": 5, "max": 50, "percentiles": {"p50": 10, "p95": 30}})
    [(5, 0.0), (10, 0.5), (30, 0.95), (50, 1.0)]
    """
    pts = [(d["min"], 0.0)]
    pts += sorted((int(v), int(k.lstrip("p")) / 100) for k, v in d["percentiles"].items())
    pts.append((d["max"], 1.0))
    return pts


def lengths_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "percentiles", "padding_waste", "count", what="lengths")
    pct = d["percentiles"]
    rec = int(d["recommended_seq_len"])
    p95 = pct.get("p95")
    share = d.get("recommended_truncated_share")
    kpis = [kpi("examples", figure(d["count"], ["count"], ""), f"{int(d.get('total_tokens') or 0):,} tokens"),
            kpi("p95 length", figure(p95, ["percentiles", "p95"], ""),
                f"p50 {pct.get('p50')}, p99 {pct.get('p99')}, max {d.get('max')} tokens"),
            kpi("train at --seq-len", figure(rec, ["recommended_seq_len"], ""),
                f"truncates {d.get('recommended_over', 0):,} examples"),
            kpi("truncated at it", figure(share, ["recommended_truncated_share"], "%", 1),
                f"of examples; {int(d.get('recommended_truncated_tokens') or 0):,} tokens")]
    waste = d["padding_waste"]
    if "random" in waste:
        kpis.append(kpi("padding, random order", figure(waste["random"], ["padding_waste", "random"], "%", 1),
                        el("span", ["grouped ", figure(waste.get("grouped"), ["padding_waste", "grouped"], "%", 1),
                                    ", packed ", figure(waste.get("packed"), ["padding_waste", "packed"], "%", 1)])))
    hist = d.get("histogram")
    edges = counts = None
    if hist:
        edges, counts = list(hist["edges"]), list(hist["counts"])
        cdf = cdf_points(edges, counts)
    else:
        cdf = percentile_cdf(d)
    markers = [Marker(int(p95), f"p95 {p95}", f"p95 = {p95} tokens", P95_COLOUR, dashed=True)] if p95 else []
    markers.append(Marker(rec, f"{rec}", f"recommended --seq-len {rec}", GOOD))
    seq_len = d.get("seq_len")
    if seq_len and int(seq_len) != rec and int(seq_len) <= 1.25 * int(d["max"]):
        markers.append(Marker(int(seq_len), f"{seq_len}", f"--seq-len {seq_len} (as given)", SEQ_COLOUR,
                              dashed=True))
    over = int(d.get("recommended_over") or 0)
    trunc_text = f"{over:,} examples ({(share or 0):.1%})\ntruncated at {rec}"
    chart = histogram_chart(edges, counts, cdf, markers, truncate_from=rec if over else None,
                            truncated_text=trunc_text, title="examples per token length, with the CDF")
    prows = [[k, figure(v, ["percentiles", k], "")] for k, v in pct.items()]
    prows = [["min", figure(d["min"], ["min"], "")], *prows, ["max", figure(d["max"], ["max"], "")],
             ["mean", figure(d.get("mean"), ["mean"], "", 1)]]
    note: list[Html] = []
    if not hist:
        note.append(el("p", "This JSON has no histogram (an older memfit): the CDF is drawn through the "
                            "percentiles only.", class_="note"))
    trunc_rows: list[list[str]] = [[el("span", [figure(rec, ["recommended_seq_len"], ""), " (p95, rounded up)"]),
                   figure(d.get("recommended_over"), ["recommended_over"], ""),
                   figure(share, ["recommended_truncated_share"], "%", 2),
                   figure(d.get("recommended_truncated_tokens"), ["recommended_truncated_tokens"], "")]]
    if seq_len:
        n = int(d["count"]) or 1
        trunc_rows.append([el("span", [figure(seq_len, ["seq_len"], ""), " (as given)"]),
                           figure(d.get("over_seq_len"), ["over_seq_len"], ""),
                           f"{int(d.get('over_seq_len') or 0) / n:.2%}",
                           figure(d.get("truncated_tokens"), ["truncated_tokens"], "")])
    sections = [section(
        "Token lengths",
        chart, *note,
        el("div", [table(["percentile", "tokens"], prows, numeric=(1,), caption="distribution (nearest rank)"),
                   table(["--seq-len", "longer", "share", "tokens cut"], trunc_rows, numeric=(1, 2, 3),
                         caption="examples truncated")], class_="two"),
        lead=f"{int(d['count']):,} examples of {d.get('source', '?')} with the {d.get('tokenizer', '?')} tokenizer "
             f"({d.get('mode', '')}). p95, not the maximum, is the sequence length to train at; the shaded part "
             "is what that truncates.",
    )]
    sections.append(_padding(d))
    if d.get("activations"):
        sections.append(_activations(d))
    skipped = d.get("skipped") or []
    if skipped:
        sections.append(section("Skipped records", el("p", f"{len(skipped):,} records were skipped: "
                                                           + "; ".join(str(s.get("reason", s)) for s in skipped[:5])
                                                           + ("; ..." if len(skipped) > 5 else ""))))
    return page(command="lengths", title=f"memfit lengths: {d.get('source', '?')}",
                subtitle=[f"tokenizer {d.get('tokenizer', '?')}, --seq-len {seq_len}, micro-batch {d.get('batch')}"
                          + (f"; activation memory for {d['model']}" if d.get("model") else "")],
                kpis=kpis, sections=sections, source=source)


def _padding(d: Mapping[str, Any]) -> Html:
    pad = d.get("padding") or {}
    rows, chart_rows = [], []
    for s in ("random", "grouped", "packed"):
        p = pad.get(s)
        if not p:
            continue
        chart_rows.append(PaddingRow(STRATEGY_NAMES[s], int(p["real_tokens"]), int(p["padding_tokens"]),
                                     float(p["waste"])))
        path: list[str | int] = ["padding", s]
        rows.append([STRATEGY_NAMES[s], figure(p["waste"], ["padding_waste", s], "%", 1),
                     figure(p["processed_tokens"], [*path, "processed_tokens"], ""),
                     figure(p["padding_tokens"], [*path, "padding_tokens"], ""),
                     f"{p['micro_batches']:,} x {p['batch']}", f"{p['peak_len']:,} / {float(p['mean_len']):,.0f}"])
    body: list[Html] = []
    if chart_rows:
        body.append(padding_chart(chart_rows, "tokens processed in one epoch: real and padding"))
    body.append(table(["batching", "padding", "tokens processed", "padding tokens", "micro-batches x size",
                       "longest / mean row"], rows, numeric=(1, 2, 3)))
    return section("Padding waste", *body,
                   lead=f"Micro-batches of {d.get('batch')} padded to their longest example in random order, "
                        "grouped by length, or packed into full rows of --seq-len.")


def _activations(d: Mapping[str, Any]) -> Html:
    rows = []
    for i, a in enumerate(d["activations"]):
        p: list[str | int] = ["activations", i]
        rows.append([STRATEGY_NAMES.get(a["strategy"], a["strategy"]), f"{a['batch']} x {a['peak_len']:,}",
                     figure(a["activation_bytes_peak"], [*p, "activation_bytes_peak"], "GiB"),
                     figure(a["activation_bytes_mean"], [*p, "activation_bytes_mean"], "GiB"),
                     figure(a["peak_bytes"], [*p, "peak_bytes"], "GiB")])
    return section(f"Activation memory of each batching ({d.get('model')})",
                   table(["batching", "largest micro-batch", "activations (largest)", "activations (mean)",
                          "peak (largest)"], rows, numeric=(2, 3, 4)))
