"""Tables and JSON for :class:`~memfit.trace.result.TraceResult`, with the estimate beside the trace."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from rich.table import Table

from memfit.estimate.arch import block_containers
from memfit.report._width import narrow
from memfit.report.estimate import verdict_line
from memfit.trace.result import TraceResult
from memfit.units import BYTES_PER_GIB, human_bytes

_BLOCK = re.compile(rf"((?:^|\.)(?:{'|'.join(block_containers())}))\.\d+(?=\.|$)")


def _gib(n: int) -> str:
    return f"{n / BYTES_PER_GIB:.3f}"


def trace_table(result: TraceResult, estimate: dict[str, Any] | None = None) -> Table:
    """Component, traced bytes, GiB, share of the peak; the estimate's figure and trace/estimate beside it."""
    s = result.spec
    title = (f"{result.model} traced: {s.method}, {s.precision}, {s.optimizer}, batch {s.batch} x seq {s.seq}, "
             f"checkpointing {s.checkpointing}, {s.attention} on {s.device}")
    if result.rank is not None:
        nodes = f" over {s.nodes} nodes" if s.nodes > 1 else ""
        title += f"; {s.sharding}, rank {result.rank} of {s.gpus}{nodes} (every figure one GPU's)"
    t = Table(title=title, caption=f"peak in the {result.peak_phase} phase (GiB = 1024^3 B)")
    t.add_column("component")
    t.add_column("traced bytes", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    if estimate is not None:
        t.add_column("estimate GiB", justify="right")
        t.add_column("trace/estimate", justify="right")
    est = (estimate or {}).get("components", {})
    for k, v in result.components.items():
        if v == 0 and not est.get(k):
            continue
        row = [k, f"{v:,}", _gib(v), f"{v / result.peak_bytes:.1%}"]
        if estimate is not None:
            e = int(est.get(k, 0))
            row += [_gib(e), f"{v / e:.3f}" if e else "-"]
        t.add_row(*row)
    row = ["[bold]peak[/]", f"[bold]{result.peak_bytes:,}[/]", f"[bold]{_gib(result.peak_bytes)}[/]", "100.0%"]
    if estimate is not None:
        e = int(estimate.get("peak_bytes") or 0)
        row += [_gib(e), f"{result.peak_bytes / e:.3f}" if e else "-"]
    t.add_row(*row)
    narrow(t, keep=("component",), drop=("GiB",))  # a narrow terminal: fewer columns, never a cut name
    return t


def by_module_kind(result: TraceResult) -> list[tuple[str, int, int, dict[str, int]]]:
    """Per-module rows folded over the decoder blocks: ``(model.layers.*.mlp.act_fn, bytes, blocks, cats)``,
    largest first, so a 80-layer model reads as a dozen rows."""
    rows: dict[str, list[Any]] = {}
    for m in result.per_module:
        kind = _BLOCK.sub(r"\1.*", m.module)
        row = rows.setdefault(kind, [0, 0, defaultdict(int)])
        row[0] += m.bytes
        row[1] += 1
        for k, v in m.by_category.items():
            row[2][k] += v
    return sorted(((k, r[0], r[1], dict(r[2])) for k, r in rows.items()), key=lambda r: -r[1])


def module_table(result: TraceResult, top: int = 15) -> Table:
    """Who holds the non-model-state bytes at the peak: the module (kind) whose forward made them."""
    t = Table(title=f"alive at the peak, by the module that created it (blocks folded as *, top {top})")
    t.add_column("module")
    t.add_column("modules", justify="right")
    t.add_column("bytes", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("categories")
    rows = by_module_kind(result)
    for kind, n, count, cats in rows[:top]:
        text = ", ".join(f"{k} {human_bytes(v)}" for k, v in cats.items() if v)
        t.add_row(kind, str(count), f"{n:,}", _gib(n), text)
    rest = rows[top:]
    if rest:
        n = sum(r[1] for r in rest)
        t.add_row(f"({len(rest)} more)", "", f"{n:,}", _gib(n), "")
    narrow(t, keep=("module",), drop=("GiB", "modules"))  # a narrow terminal: fewer columns, never a cut name
    return t


def saved_table(result: TraceResult, top: int = 12) -> Table:
    """Bytes autograd saved for backward per decoder block (unique storages)."""
    t = Table(title=f"saved for backward: {result.saved_total:,} B ({_gib(result.saved_total)} GiB)")
    t.add_column("block / module")
    t.add_column("saved bytes", justify="right")
    t.add_column("GiB", justify="right")
    items = list(result.saved_by_layer.items())
    layers = sorted(((k, v) for k, v in items if k.startswith("layer ")), key=lambda kv: int(kv[0].split()[1]))
    others = sorted(((k, v) for k, v in items if not k.startswith("layer ")), key=lambda kv: -kv[1])
    shown = layers if len(layers) <= top else layers[: top // 2] + [("...", -1)] + layers[-top // 2:]
    for k, v in shown + others:
        if v < 0:
            t.add_row("...", "", "")
        else:
            t.add_row(k, f"{v:,}", _gib(v))
    narrow(t, keep=("block / module",), drop=())  # a narrow terminal: fewer columns, never a cut name
    return t


def verdict(result: TraceResult) -> str | None:
    """One line against ``--gpu`` with the rule in numbers (:mod:`memfit.estimate.fits`)."""
    v = result.verdict
    if v is None:
        return None
    return verdict_line(v)


def trace_json(result: TraceResult, estimate: dict[str, Any] | None = None) -> dict[str, Any]:
    d = result.to_dict()
    if estimate is not None:
        d["estimate"] = {"peak_bytes": estimate.get("peak_bytes"), "reserved_bytes": estimate.get("reserved_bytes"),
                         "components": estimate.get("components")}
    return d
