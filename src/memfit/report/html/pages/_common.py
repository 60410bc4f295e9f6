"""Pieces every command's page uses: the run summary, the GPU line, the table of bytes by category."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memfit.errors import MemfitError
from memfit.report.html.axis import Capacity
from memfit.report.html.figures import JsonPath, exact, figure, human
from memfit.report.html.markup import Html, el, join
from memfit.report.html.page import section, table
from memfit.report.html.palette import colour, label, ordered
from memfit.report.html.timeline import (
    StepSeries,
    moments_series,
    peak_zoom,
    series_rows,
    step_chart,
    timeline_series,
)


def spec_summary(spec: Mapping[str, Any] | None) -> str:
    """``lora r16, bf16, adamw, batch 4 x seq 2048, checkpointing none, sdpa on cuda``."""
    if not spec:
        return ""
    method = str(spec.get("method", "?"))
    if method in ("lora", "qlora") and spec.get("rank"):
        method += f" r{spec['rank']}"
    ckpt = spec.get("checkpointing", "none")
    if ckpt == "every-k":
        ckpt = f"every-{spec.get('checkpoint_every')}"
    parts = [method, str(spec.get("precision", "?")), str(spec.get("optimizer", "?")),
             f"batch {spec.get('batch')} x seq {spec.get('seq')}"]
    if spec.get("grad_accum", 1) not in (1, None):
        parts.append(f"grad_accum {spec['grad_accum']}")
    parts += [f"checkpointing {ckpt}", f"{spec.get('attention', '?')} attention on {spec.get('device', '?')}"]
    if spec.get("loss") not in (None, "standard"):
        parts.append(f"loss {spec['loss']}")
    if spec.get("sharding") not in (None, "none"):
        parts.append(f"{spec['sharding']} over {spec.get('gpus')} GPUs (figures per GPU)")
    return ", ".join(parts)


def gpu_capacity(gpu: Mapping[str, Any] | None = None, gpu_bytes: int | None = None,
                 spec: Mapping[str, Any] | None = None) -> Capacity | None:
    """The GPU line: from the JSON's ``gpu`` object, else ``gpu_bytes`` with the spec's ``--gpu`` as its name,
    else the spec's ``--gpu`` looked up in memfit's GPU table (None when there is no GPU at all). The spec
    named the GPU in JSON written before the GPU left the run spec."""
    if gpu and gpu.get("bytes"):
        return Capacity(f"GPU {gpu.get('name', '')}".strip(), int(gpu["bytes"]))
    name = (spec or {}).get("gpu")
    if gpu_bytes:
        return Capacity(f"GPU {name}" if name else "GPU", int(gpu_bytes))
    if name:
        from memfit.estimate import resolve_gpu

        try:
            g = resolve_gpu(str(name))
        except MemfitError:
            return None
        return Capacity(f"GPU {g.name}", g.bytes)
    return None


def category_table(parts: Mapping[str, int], path: JsonPath, *, total: int | None = None,
                   total_path: JsonPath | None = None, total_label: str = "total",
                   caption: str | None = None) -> Html:
    """Category, exact bytes, GiB, share of the total; categories with 0 bytes are left out."""
    whole = total if total is not None else sum(parts.values())
    rows: list[Sequence[str]] = []
    for cat in ordered(parts):
        v = int(parts[cat])
        if v == 0:
            continue
        swatch = el("span", [el("i", "", class_="sw", style=f"background:{colour(cat)}"), label(cat)], class_="cat")
        rows.append([swatch, figure(v, [*path, cat], "B"), figure(v, [*path, cat], "GiB"),
                     f"{v / whole:.1%}" if whole else "-"])
    if total is not None:
        tp = total_path or []
        rows.append([total_label, figure(total, tp, "B") if tp else f"{total:,} B",
                     figure(total, tp, "GiB") if tp else human(total), "100.0%"])
    return table(["category", "bytes", "GiB", "share"], rows, numeric=(1, 2, 3), caption=caption,
                 total_last=total is not None)


def require(data: Mapping[str, Any], *keys: str, what: str) -> None:
    """Raise one clear error when the JSON lacks a key this page needs."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise MemfitError(f"this {what} JSON has no {', '.join(repr(k) for k in missing)}: pass the unedited "
                          f"output of `memfit {what} --json`")


def fits_text(fits: bool | None, spare: int | None) -> tuple[str, str | None]:
    """A verdict for a KPI: ``("fits, 3.21 GiB spare", "ok")`` / ``("short by 49.03 GiB", "bad")``."""
    if fits is None or spare is None:
        return ("no GPU given", None)
    if spare >= 0:
        return (f"fits, {human(spare)} spare", "ok")
    return (f"short by {human(-spare)}", "bad")


def recorded_timeline(d: Mapping[str, Any], cap: Capacity | None, *, title: str) -> Html:
    """The memory-over-the-step section of an engine's recorded ``timeline``, with a close-up of the peak."""
    return over_the_step(timeline_series(d["timeline"]), cap, title=title, zoom=peak_zoom(d["timeline"]))


def step_series(d: Mapping[str, Any]) -> StepSeries | None:
    """The engine's ``timeline`` when the JSON has one, else its step ``moments``, else None."""
    if d.get("timeline"):
        return timeline_series(d["timeline"])
    if d.get("moments"):
        return moments_series(d["moments"])
    return None


def phase_highs(series: StepSeries) -> list[tuple[str, int, int]]:
    """The highest point of each phase, in order of first appearance: ``(phase, index, bytes)``.

    >>> s = moments_series({"forward: a": 3, "backward: b": 7, "backward: c": 9, "optimizer: d": 2})
    >>> phase_highs(s)
    [('forward', 0, 3), ('backward', 2, 9), ('optimizer', 3, 2)]
    """
    best: dict[str, tuple[int, int]] = {}
    for i, (phase, seg) in enumerate(zip(series.phases, series.segments, strict=True)):
        if phase not in best or seg.total > best[phase][1]:
            best[phase] = (i, seg.total)
    return [(p, i, v) for p, (i, v) in best.items()]


def over_the_step(series: StepSeries, cap: Capacity | None, *, title: str,
                  peak_components: tuple[Mapping[str, int], JsonPath, int, JsonPath] | None = None,
                  zoom: StepSeries | None = None) -> Html:
    """The memory-over-the-step section: the chart, then a table of the moments (or, for a timeline, of each
    phase's highest point) and what is alive at the peak by category.

    ``peak_components`` (parts, their JSON path, the peak, its path) lists the peak's categories when the
    series has totals only (the estimate's moments today: its components are the peak moment's). ``zoom``: a
    close-up of the events around the peak, drawn under the whole step (:func:`peak_zoom`)."""
    chart = step_chart(series, cap, title)
    if zoom is not None:
        first, last = zoom.segments[0].x0, zoom.segments[-1].x0
        title_zoom = f"close-up: events {first:,.0f} to {last:,.0f}, around the peak"
        chart = join([chart, el("p", f"Close-up of events {first:,.0f} to {last:,.0f}, around the peak, every "
                                     "point drawn:", class_="note"), step_chart(zoom, cap, title_zoom)])
    peak_i = series.peak_index
    peak_label = series.labels[peak_i]
    if series.kind == "moments":
        rows = series_rows(series)
        points = table(["moment", "bytes", "GiB"], [[r[0], r[2], r[3]] for r in rows], numeric=(1, 2),
                       caption="each moment")
    else:
        points = table(["phase", "highest at", "bytes", "GiB"],
                       [[p, el("code", series.modules[i]) if series.modules[i] else "-", exact(v), human(v)]
                        for p, i, v in phase_highs(series)], numeric=(2, 3), caption="each phase's highest point")
    parts = series.segments[peak_i].parts
    if set(parts) == {"total"} and peak_components is not None:
        comp, path, total, total_path = peak_components
        alive = category_table(comp, path, total=total, total_path=total_path,
                               caption=f"alive at the peak ({peak_label})")
    else:
        alive = category_table(parts, list(series.paths[peak_i]), total=series.segments[peak_i].total,
                               caption=f"alive at the peak ({peak_label})")
    if series.kind == "moments":
        what = ("The estimate's moments of the step: the forward at the loss, the backward at the loss, through "
                "lm_head, the last and the first decoder block, the embeddings, and the optimizer step.")
    else:
        what = ("Live bytes by category at each allocation and free of the step, as the engine recorded them "
                "(the forward until the output layer, the loss after it, the backward, the optimizer step).")
    return section("Memory over the step", chart, el("div", [points, alive], class_="two"),
                   lead=what + " The peak is marked; hover the chart for exact bytes.")
