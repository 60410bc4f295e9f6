"""The page for ``memfit trace --json``: the traced budget beside the estimate's, memory over the step,
saved activations per decoder block and per op kind, and who holds the bytes at the peak."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memfit.estimate.arch import block_containers
from memfit.report.html.bars import Bar, column_chart, row_chart
from memfit.report.html.budget import BarRow, BudgetChart, budget_chart
from memfit.report.html.figures import figure, human
from memfit.report.html.markup import Html, el
from memfit.report.html.page import kpi, page, section, table
from memfit.report.html.pages._common import (
    category_table,
    fits_text,
    gpu_capacity,
    recorded_timeline,
    require,
    spec_summary,
)
from memfit.report.html.palette import colour, label, ordered

_BLOCK = re.compile(rf"((?:^|\.)(?:{'|'.join(block_containers())}))\.\d+(?=\.|$)")
_LAYER = re.compile(r"^layer (\d+)$")


def fold_blocks(by_module: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """Module paths folded over the decoder blocks: ``(model.layers.*.mlp.act_fn, bytes, modules)``,
    largest first, so an 80-layer model reads as a dozen op kinds.

    >>> fold_blocks({"model.layers.0.mlp": 4, "model.layers.1.mlp": 4, "model": 3})
    [('model.layers.*.mlp', 8, 2), ('model', 3, 1)]
    """
    rows: dict[str, list[int]] = {}
    for module, n in by_module.items():
        kind = _BLOCK.sub(r"\1.*", module)
        row = rows.setdefault(kind, [0, 0])
        row[0] += int(n)
        row[1] += 1
    return sorted(((k, r[0], r[1]) for k, r in rows.items()), key=lambda r: (-r[1], r[0]))


def layer_runs(values: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Consecutive layers with the same bytes as one row: ``(first, last, bytes)``.

    >>> layer_runs([(0, 5), (1, 7), (2, 7), (3, 7), (4, 5)])
    [(0, 0, 5), (1, 3, 7), (4, 4, 5)]
    """
    out: list[tuple[int, int, int]] = []
    for i, v in values:
        if out and out[-1][2] == v and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i, v)
        else:
            out.append((i, i, v))
    return out


def trace_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "components", "peak_bytes", "saved_for_backward", what="trace")
    spec = d.get("spec") or {}
    peak = int(d["peak_bytes"])
    reserved = int(d.get("reserved_bytes") or peak)
    cap = gpu_capacity(d.get("gpu"), d.get("gpu_bytes"), spec)
    est = d.get("estimate") or None
    need = reserved if d.get("reserved_bytes") else peak
    spare = cap.bytes - need if cap else None
    verdict, cls = fits_text(d.get("fits"), spare)
    kpis = [kpi("traced peak", figure(peak, ["peak_bytes"], "GiB"), f"{peak:,} B in the {d.get('peak_phase')} phase")]
    if d.get("reserved_bytes"):
        kpis.append(kpi("reserved (+ allocator, CUDA context)", figure(reserved, ["reserved_bytes"], "GiB"),
                        f"{reserved:,} B"))
    if cap is not None:
        kpis.append(kpi(cap.name, figure(cap.bytes, ["gpu_bytes"], "GiB"), verdict, cls))
    if est and est.get("peak_bytes"):
        e = int(est["peak_bytes"])
        kpis.append(kpi("estimate", figure(e, ["estimate", "peak_bytes"], "GiB"), f"trace / estimate = {peak / e:.4f}"))
    saved = d["saved_for_backward"]
    kpis.append(kpi("saved for backward", figure(saved.get("total"), ["saved_for_backward", "total"], "GiB"),
                    f"{int(saved.get('total') or 0):,} B"))
    timing = d.get("timing") or {}
    traced = ""
    if timing:
        total_s = float(timing.get("build_seconds", 0)) + float(timing.get("step_seconds", 0))
        traced = (f"traced in {total_s:.1f} s (build {timing.get('build_seconds')} s, step "
                  f"{timing.get('step_seconds')} s) on fake tensors")

    cuda = spec.get("device") == "cuda"
    rows = [BarRow("trace", {k: int(v) for k, v in d["components"].items()},
                   reserved_extra=max(reserved - peak, 0) if cuda else 0)]
    comparison = category_table(d["components"], ["components"], total=peak, total_path=["peak_bytes"],
                                caption="traced, at the peak")
    if est and est.get("components"):
        e_peak = int(est.get("peak_bytes") or sum(est["components"].values()))
        e_res = int(est.get("reserved_bytes") or e_peak)
        rows.append(BarRow("estimate", {k: int(v) for k, v in est["components"].items()},
                           reserved_extra=max(e_res - e_peak, 0) if cuda else 0))
        comparison = _versus(d["components"], est["components"], peak, e_peak)
    sections = [section("Budget at the peak", budget_chart(BudgetChart(rows, cap, "traced and estimated peak by "
                                                                                  "category")),
                        comparison,
                        lead="Bytes alive at the traced peak by category, the analytic estimate of the same run "
                             "beside it" + (f", against {cap.text()}." if cap else "."))]
    sections.append(_over_the_step(d, cap))
    sections.extend(_saved(saved))
    sections.append(_alive(d))
    return page(command="trace", title=f"memfit trace: {d.get('model', '?')}",
                subtitle=[spec_summary(spec)] + ([traced] if traced else []),
                kpis=kpis, sections=sections, source=source)


def _versus(traced: Mapping[str, int], estimated: Mapping[str, int], peak: int, e_peak: int) -> Html:
    """Category, traced bytes, estimated bytes, traced GiB, trace / estimate."""
    rows = []
    for cat in ordered(set(traced) | set(estimated)):
        t, e = int(traced.get(cat, 0)), int(estimated.get(cat, 0))
        if t == 0 and e == 0:
            continue
        swatch = el("span", [el("i", "", class_="sw", style=f"background:{colour(cat)}"), label(cat)])
        rows.append([swatch, figure(t, ["components", cat], "B") if cat in traced else "-",
                     figure(e, ["estimate", "components", cat], "B") if cat in estimated else "-",
                     figure(t, ["components", cat], "GiB") if cat in traced else "-",
                     f"{t / e:.4f}" if e and cat in traced else "-"])
    rows.append(["peak", figure(peak, ["peak_bytes"], "B"), figure(e_peak, ["estimate", "peak_bytes"], "B"),
                 figure(peak, ["peak_bytes"], "GiB"), f"{peak / e_peak:.4f}" if e_peak else "-"])
    return table(["category", "traced bytes", "estimated bytes", "traced GiB", "trace / estimate"], rows,
                 numeric=(1, 2, 3, 4), total_last=True)


def _over_the_step(d: Mapping[str, Any], cap: Any) -> Html:
    if d.get("timeline"):
        return recorded_timeline(d, cap, title="live bytes through the traced step")
    phases = d.get("phase_peaks") or {}
    bars = [Bar(p, int(v)) for p, v in phases.items()]
    return section(
        "Peak of each phase",
        row_chart(bars, "the highest live bytes in each phase", label_width=110),
        table(["phase", "bytes", "GiB"], [[p, figure(int(v), ["phase_peaks", p], "B"),
                                           figure(int(v), ["phase_peaks", p], "GiB")] for p, v in phases.items()],
              numeric=(1, 2)),
        lead="The trace's high-water mark in the forward, the backward and the optimizer step.",
    )


def _saved(saved: Mapping[str, Any]) -> list[Html]:
    by_layer = saved.get("by_layer") or {}
    layers = sorted(((int(m.group(1)), k, int(v)) for k, v in by_layer.items() if (m := _LAYER.match(k))))
    others = sorted(((k, int(v)) for k, v in by_layer.items() if not _LAYER.match(k)), key=lambda kv: -kv[1])
    out = []
    if layers:
        bars = [Bar(str(i), v, tip=f"{k}: {v:,} B ({human(v)})") for i, k, v in layers]
        rows = []
        for first, last, v in layer_runs([(i, v) for i, _, v in layers]):
            k = f"layer {first}"
            name = k if first == last else f"layers {first}-{last} (each)"
            rows.append([name, figure(v, ["saved_for_backward", "by_layer", k], "B"),
                         figure(v, ["saved_for_backward", "by_layer", k], "GiB", 3)])
        rows += [[k, figure(v, ["saved_for_backward", "by_layer", k], "B"),
                  figure(v, ["saved_for_backward", "by_layer", k], "GiB", 3)] for k, v in others]
        out.append(section(
            "Saved for the backward, per decoder block",
            column_chart(bars, "bytes autograd saved per decoder block", "decoder block"),
            table(["block / module", "bytes", "GiB"], rows, numeric=(1, 2)),
            lead="Unique storages autograd keeps for the backward, by the block whose forward saved them "
                 "(outside the blocks: the rows after the last block).",
        ))
    by_module = saved.get("by_module") or {}
    if by_module:
        kinds = fold_blocks(by_module)
        top = kinds[:14]
        out.append(section(
            "Saved for the backward, per op kind",
            row_chart([Bar(k.removeprefix("model."), n, tip=f"{k} ({m} modules): {n:,} B ({human(n)})")
                       for k, n, m in top],
                      "bytes saved per module kind, blocks folded as *", label_width=250),
            table(["module kind (blocks folded as *)", "modules", "bytes", "GiB"],
                  [[k, f"{m:,}", f"{n:,} B", human(n)] for k, n, m in kinds], numeric=(1, 2, 3)),
            lead="The same bytes by the module whose forward saved them, decoder blocks folded together.",
        ))
    return out


def _alive(d: Mapping[str, Any]) -> Html:
    """Who holds the non-model-state bytes at the peak, by module kind and category."""
    per = d.get("per_module") or []
    rows: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    for m in per:
        kind = _BLOCK.sub(r"\1.*", str(m["module"]))
        row = rows.setdefault(kind, {})
        counts[kind] = counts.get(kind, 0) + 1
        for c, v in (m.get("by_category") or {}).items():
            row[c] = row.get(c, 0) + int(v)
    ranked = sorted(rows.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    body = []
    for kind, cats in ranked[:20]:
        text = [el("span", [el("i", "", class_="sw", style=f"background:{colour(c)}"),
                            f"{label(c)} {human(cats[c])} "]) for c in ordered(cats) if cats[c]]
        body.append([kind, f"{counts[kind]:,}", f"{sum(cats.values()):,} B", el("span", text)])
    if len(ranked) > 20:
        rest = sum(sum(c.values()) for _, c in ranked[20:])
        body.append([f"({len(ranked) - 20} more)", "", f"{rest:,} B", ""])
    return section("Alive at the peak, by the module that made it",
                   table(["module (blocks folded as *)", "modules", "bytes", "categories"], body, numeric=(1, 2)),
                   lead="Beyond the model states: the activations, logits and temporaries alive at the peak, by the "
                        "module whose forward created them.")
