"""Rendering ``memfit measure``: the runs table, peak against batch, the checkpointing trade (and its verdict
in words), the categories, the plot.

Sizes in binary units (MiB = 1024^2 B, GiB = 1024^3 B), as torch.cuda reports them.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.estimate.category import Category
from memfit.estimate.constants import RULE_OF_THUMB_BYTES
from memfit.measure.regression import CheckpointingTrade, TradeAdvice
from memfit.measure.sweep import SweepResult
from memfit.report._width import narrow, split_columns
from memfit.units import BYTES_PER_GIB, human_bytes


def _bytes(n: int | None) -> str:
    return "-" if n is None else human_bytes(n)


def runs_table(result: SweepResult) -> Table:
    """One row per measured point, the estimate and measured/estimated beside it."""
    reserved = any(r.reserved_bytes is not None for r in result.runs)
    t = Table(title=f"memfit measure {result.model} on {result.device} (MiB = 1024^2 B, GiB = 1024^3 B)",
              title_justify="left")
    for col in ("batch", "seq", "ckpt", "peak"):
        t.add_column(col, justify="left" if col == "ckpt" else "right", no_wrap=True)
    if reserved:
        t.add_column("reserved", justify="right")
    for col in ("estimate", "meas/est", "phase", "s/step", "tok/s"):
        t.add_column(col, justify="left" if col == "phase" else "right", no_wrap=True)
    for r in result.runs:
        if not r.fits:
            row = [str(r.batch), str(r.seq), r.checkpointing, Text("OOM", style="bold red")]
            if reserved:
                row.append("-")
            row += [_bytes(r.estimate_bytes), "-", Text("does not fit", style="red"), "-", "-"]
            t.add_row(*row)
            continue
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        row = [str(r.batch), str(r.seq), r.checkpointing, _bytes(r.peak_bytes)]
        if reserved:
            row.append(_bytes(r.reserved_bytes))
        row += [_bytes(r.estimate_bytes), ratio, r.peak_phase or "-",
                f"{r.step_seconds:.4f}" if r.step_seconds is not None else "-",
                f"{r.tokens_per_second:,.0f}" if r.tokens_per_second else "-"]
        t.add_row(*row)
    # a narrow terminal: fewer columns, never a cut figure
    narrow(t, keep=("ckpt",), drop=("tok/s", "phase", "reserved", "s/step"))
    return t


def category_table(result: SweepResult) -> Table | None:
    """Bytes alive at the peak by category, one column per point that fits."""
    runs = [r for r in result.runs if r.fits]
    if not runs:
        return None
    t = Table(title="alive at the peak, by category", title_justify="left")
    t.add_column("category", no_wrap=True)
    for r in runs:
        t.add_column(f"b{r.batch} s{r.seq} {r.checkpointing}", justify="right", no_wrap=True)
    keys = [k for k in Category if any(r.by_category.get(k) for r in runs)]
    for k in keys:
        t.add_row(k, *[_bytes(r.by_category.get(k, 0)) for r in runs])
    if any(r.host_bytes for r in runs):  # --offload: peak of the host copies, not part of the device bytes above
        t.add_row("host (--offload)", *[_bytes(r.host_bytes) for r in runs])
    return t


def peak_vs_batch_lines(result: SweepResult) -> list[str]:
    """``peak = slope x batch + intercept (R^2)`` and the activation constant, per (seq, checkpointing)."""
    out = []
    for f in result.peak_vs_batch:
        out.append(f"seq {f.seq}, checkpointing {f.checkpointing}: peak = {human_bytes(f.slope_bytes_per_sample)}"
                   f" per sample x batch + {human_bytes(f.intercept_bytes)} (R^2 = {f.r2:.4f}); activation "
                   f"constant {f.bytes_per_layer_token_hidden:.1f} B per layer x token x hidden "
                   f"(lesson: ~{RULE_OF_THUMB_BYTES})")
    return out


def trade_verdict(fraction_saved: float, slowdown: float, advice: str) -> str:
    """The checkpointing trade in one line (``advice`` is :attr:`CheckpointingTrade.advice`).

    >>> trade_verdict(0.61, 1.27, "take")
    'saves 61% for 27% more time: take it'
    """
    pct = round(100 * fraction_saved)
    extra = round(100 * (slowdown - 1))
    more = f"{extra}% more time" if extra >= 0 else f"{-extra}% less time"
    if advice == TradeAdvice.SKIP:
        return f"saves {pct}% for {more}: skip it, activations are not the cost here"
    if advice == TradeAdvice.TAKE:
        return f"saves {pct}% for {more}: take it"
    return f"saves {pct}% for {more}: take it only if the run does not fit without it"


def verdict(trade: CheckpointingTrade) -> str:
    return trade_verdict(trade.fraction_saved, trade.slowdown, trade.advice)


def trade_table(result: SweepResult) -> Table | None:
    if not result.trades:
        return None
    t = Table(title="checkpointing trade", title_justify="left")
    for col in ("batch", "seq", "without", "with", "saved", "saved %", "time x", "verdict"):
        t.add_column(col, justify="left" if col == "verdict" else "right")
    for tr in result.trades:
        t.add_row(str(tr.batch), str(tr.seq), human_bytes(tr.peak_without), human_bytes(tr.peak_with),
                  human_bytes(tr.saved_bytes), f"{100 * tr.fraction_saved:.0f}%", f"{tr.slowdown:.2f}",
                  verdict(tr))
    narrow(t, keep=(), drop=("saved %",))  # a narrow terminal: fewer columns, never a cut figure
    return t


def max_batch_line(result: SweepResult) -> str | None:
    mb = result.max_batch
    if mb is None:
        return None
    probes = ", ".join(f"{p.batch}:{'fits' if p.fits else 'OOM'}" for p in mb.probes)
    start = f"estimate's start {mb.estimate_start}" if mb.estimate_start is not None else "no estimate, start 1"
    if mb.max_batch == 0:
        return f"does not fit at batch 1 (seq {mb.seq}) within {human_bytes(mb.limit_bytes)} ({start}; {probes})"
    return (f"largest micro-batch that fits {human_bytes(mb.limit_bytes)} at seq {mb.seq}, checkpointing "
            f"{mb.checkpointing}: {mb.max_batch} ({start}; probes {probes})")


def oom_lines(result: SweepResult) -> list[str]:
    return [r.error or f"does not fit at batch {r.batch}" for r in result.runs if not r.fits]


def measure_report(result: SweepResult) -> Group:
    parts: list[Any] = [runs_table(result)]
    parts += [Text(line, style="red") for line in oom_lines(result)]
    cats = category_table(result)
    if cats is not None:  # one column per point: a narrow terminal gets it in several tables, the category first
        parts += split_columns(cats)
    parts += [Text(line) for line in peak_vs_batch_lines(result)]
    trades = trade_table(result)
    if trades is not None:
        parts.append(trades)
    line = max_batch_line(result)
    if line:
        parts.append(Text(line, style="bold"))
    return Group(*parts)


def measure_plot(result: SweepResult, path: str) -> None:
    """Peak vs batch per (seq, checkpointing): measured points, least-squares line, estimate beside (MiB or
    GiB)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = max([r.peak_bytes or 0 for r in result.runs] + [r.estimate_bytes or 0 for r in result.runs])
    mib, unit = (1024**3, "GiB = 1024^3 B") if top >= 2 * 1024**3 else (1024**2, "MiB = 1024^2 B")
    groups: dict[tuple[int, str], list[Any]] = {}
    for r in result.runs:
        if r.fits:
            groups.setdefault((r.seq, r.checkpointing), []).append(r)
    lines = {(f.seq, f.checkpointing): f for f in result.peak_vs_batch}
    for i, ((seq, ckpt), rows) in enumerate(sorted(groups.items())):
        rows.sort(key=lambda r: r.batch)
        color = f"C{i}"
        label = f"seq {seq}, ckpt {ckpt}"
        ax.plot([r.batch for r in rows], [r.peak_bytes / mib for r in rows], "o", color=color,
                label=f"{label}: measured")
        f = lines.get((seq, ckpt))
        if f is not None:
            xs = [0, max(r.batch for r in rows)]
            ax.plot(xs, [(f.slope_bytes_per_sample * x + f.intercept_bytes) / mib for x in xs], "-", color=color,
                    alpha=0.6, label=f"least squares R^2={f.r2:.4f}")
        est = [r for r in rows if r.estimate_bytes]
        if est:
            ax.plot([r.batch for r in est], [r.estimate_bytes / mib for r in est], "x", color=color, ms=9,
                    label=f"{label}: estimate")
    ax.set_xlabel("micro-batch")
    ax.set_ylabel(f"peak memory ({unit})")
    ax.set_title(f"{result.model}: peak vs batch ({result.device})")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sharded_table(model: str, row: dict[str, Any]) -> Table:
    """One sharded point (``measure --sharding``): each rank's measured peak, the estimate's per-GPU peak beside
    it (GiB = 1024^3 B)."""
    t = Table(title=f"{model}: {row['sharding']} over {row['gpus']} ranks ({row['backend']} on {row['device']}), "
                    f"batch {row['batch']} x seq {row['seq']}",
              caption=f"estimate per GPU {row['estimate_bytes']:,} B "
                      f"({row['estimate_bytes'] / BYTES_PER_GIB:.3f} GiB), {row['estimate_error']:+.2%} against the "
                      "largest rank's measured peak")
    for col in ("rank", "peak bytes", "GiB", "phase", "estimate error"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    for r in row["ranks"]:
        err = (row["estimate_bytes"] - r["peak_bytes"]) / r["peak_bytes"]
        t.add_row(str(r["rank"]), f"{r['peak_bytes']:,}", f"{r['peak_bytes'] / BYTES_PER_GIB:.3f}", r["peak_phase"],
                  f"{err:+.2%}")
    return t
