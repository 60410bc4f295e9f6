"""The page for ``memfit estimate --json``: the budget at the peak, memory over the step, one block's saved
activations, the model states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.report.html.bars import Bar, row_chart
from memfit.report.html.budget import BarRow, BudgetChart, budget_chart
from memfit.report.html.figures import figure, human
from memfit.report.html.markup import el
from memfit.report.html.page import kpi, page, section, table
from memfit.report.html.pages._common import (
    category_table,
    fits_text,
    gpu_capacity,
    over_the_step,
    require,
    spec_summary,
    step_series,
)
from memfit.units import BYTES_PER_GB


def estimate_page(d: Mapping[str, Any], source: str | None = None) -> str:
    require(d, "components", "peak_bytes", "moments", what="estimate")
    spec = d.get("spec") or {}
    peak = int(d["peak_bytes"])
    reserved = int(d.get("reserved_bytes") or peak)
    cuda = spec.get("device") == "cuda"
    cap = gpu_capacity(d.get("gpu"), d.get("gpu_bytes"), spec)
    verdict, cls = fits_text(d.get("fits"), d.get("spare_bytes"))
    kpis = [
        kpi("peak allocated", figure(peak, ["peak_bytes"], "GiB"), f"{peak:,} B · {peak / BYTES_PER_GB:.2f} GB"),
    ]
    if cuda:
        kpis.append(kpi("reserved (+ allocator, CUDA context)", figure(reserved, ["reserved_bytes"], "GiB"),
                        f"{reserved:,} B"))
    if cap is not None:
        kpis.append(kpi(cap.name, figure(cap.bytes, ["gpu_bytes"], "GiB") if d.get("gpu_bytes") else human(cap.bytes),
                        verdict, cls))
    kpis.append(kpi("peak at", str(d.get("peak_moment", "")), f"{d.get('peak_phase', '')} phase"))
    if "activation_bytes" in d:
        kpis.append(kpi("saved activations", figure(d["activation_bytes"], ["activation_bytes"], "GiB"),
                        f"{int(d['activation_bytes']):,} B"))

    row = BarRow("peak (allocated)", {k: int(v) for k, v in d["components"].items()},
                 reserved_extra=max(reserved - peak, 0) if cuda else 0)
    budget = section(
        "Budget at the peak",
        budget_chart(BudgetChart([row], cap, "bytes alive at the peak by category")),
        category_table(d["components"], ["components"], total=peak, total_path=["peak_bytes"],
                       total_label="peak (allocated)"),
        lead=f"What is alive at {d.get('peak_moment', 'the peak')}, by category"
             + (f", against {cap.text()}" if cap else "") + "."
             + (" The pale segment is what the CUDA caching allocator and context reserve beyond it." if cuda else ""),
    )
    sections = [budget]
    series = step_series(d)
    if series is not None:
        sections.append(over_the_step(series, cap, title="live bytes through the training step",
                                      peak_components=(d["components"], ["components"], peak, ["peak_bytes"])))
    per_layer = d.get("activations_per_layer") or {}
    if per_layer:
        items = sorted(per_layer.items(), key=lambda kv: -int(kv[1]))
        sections.append(section(
            "Saved activations of one decoder block, by op",
            row_chart([Bar(k, int(v)) for k, v in items], "bytes one block saves for the backward, by op",
                      label_width=130),
            table(["op", "bytes", "GiB"], [[k, figure(int(v), ["activations_per_layer", k], "B"),
                                            figure(int(v), ["activations_per_layer", k], "GiB", 3)] for k, v in items],
                  numeric=(1, 2)),
            lead="What the forward of one typical block keeps for the backward (x the number of blocks, unless "
                 "checkpointing drops it).",
        ))
    states = d.get("model_states") or {}
    if states:
        extra = []
        if "rule_of_thumb_bytes" in d and "activation_bytes" in d:
            rot, act = int(d["rule_of_thumb_bytes"]), int(d["activation_bytes"])
            extra.append(el("p", [
                "The lesson's rule of thumb L·b·s·h·20 gives ", figure(rot, ["rule_of_thumb_bytes"], "GB"), " (",
                figure(rot, ["rule_of_thumb_bytes"], "GiB"), ") of activations; memfit's estimate is ",
                figure(act, ["activation_bytes"], "GiB"), f", x{act / rot:.2f}." if rot else "."], class_="note"))
        sections.append(section(
            "Model states (full sizes, whatever the phase)",
            category_table(states, ["model_states"]),
            *extra,
            lead=f"{int(d.get('trainable_params', 0)):,} trainable parameters." if "trainable_params" in d else "",
        ))
    return page(command="estimate", title=f"memfit estimate: {d.get('model', '?')}",
                subtitle=[spec_summary(spec)], kpis=kpis, sections=sections, source=source)
