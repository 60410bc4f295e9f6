"""Tables and JSON for ``memfit fit``: the ordered path step by step, the cheapest configuration beside it."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.advise import FitReport, Setup
from memfit.advise.plan import setup_changes
from memfit.estimate.fits import reserved_bytes
from memfit.report._width import narrow
from memfit.units import BYTES_PER_GIB, BYTES_PER_MB


def fit_json(report: FitReport) -> dict[str, Any]:
    """Issue 9's JSON: fits_initially, steps, final, fits, cheapest (plus context keys)."""
    return report.to_dict()


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / BYTES_PER_GIB:.2f}"


def describe_changes(before: Setup, after: Setup) -> str:
    """``"batch 8->2, grad_accum 1->4"``: the knobs that differ."""
    parts = []
    changes = setup_changes(before, after)
    if "checkpointing" in changes or "checkpoint_every" in changes:
        changes.pop("checkpoint_every", None)
        changes["checkpointing"] = [_ckpt(before), _ckpt(after)]
    for key, (old, new) in changes.items():
        old_s = ",".join(old) if isinstance(old, list) else old
        new_s = ",".join(new) if isinstance(new, list) else new
        parts.append(f"{key} {old_s}->{new_s}")
    return ", ".join(parts) or "(no change)"


def _ckpt(setup: Setup) -> str:
    s = setup.spec
    return f"every-{s.checkpoint_every}" if s.checkpointing == "every-k" else s.checkpointing


def fit_table(report: FitReport, width: int | None = None) -> Group:
    """The ordered path as a table (GiB = 1024^3 bytes), then the verdict, the cheapest configuration,
    the rank lesson in numbers, and the steps skipped. Narrower than the table (``width``, the terminal's by
    default), each step's cost is printed under the table instead of in it."""
    gpu = report.gpu
    per = " per GPU" if report.gpus > 1 else ""
    what = "reserved" if report.device == "cuda" else "peak"
    title = (f"memfit fit: {report.model} on {gpu.name} ({_gib(gpu.bytes)} GiB{per}"
             f"{f' x {report.gpus}' if report.gpus > 1 else ''}); fits = {what} + headroom "
             f"{_gib(report.headroom_bytes)} GiB ({report.headroom.describe()}) <= {_gib(gpu.bytes)} GiB, "
             f"i.e. {what} <= {_gib(report.budget_bytes)} GiB")
    t = Table(title=title, title_justify="left", caption=f"start: {_spec_summary(report.initial)}",
              caption_justify="left")
    t.add_column("#", justify="right")
    t.add_column("step", no_wrap=True)
    t.add_column("change")
    t.add_column("peak GiB", justify="right")
    if report.device == "cuda":
        t.add_column("reserved GiB", justify="right")
    t.add_column("saved GiB", justify="right")
    t.add_column("fits")
    t.add_column("cost", overflow="fold", max_width=70)
    ok = "[green]yes[/]"
    no = "[red]no[/]"
    def figures(peak: int) -> list[str]:
        cells = [_gib(peak)]
        if report.device == "cuda":
            cells.append(_gib(reserved_bytes(peak, report.device)))
        return cells

    t.add_row("0", "start", "(as given)", *figures(report.initial_peak_bytes), "",
              ok if report.fits_initially else no, "")
    previous = report.initial
    for i, step in enumerate(report.steps, 1):
        t.add_row(str(i), step.action, describe_changes(previous, step.setup), *figures(step.peak_bytes),
                  _gib(step.saved_bytes), ok if step.fits else no, step.cost)
        previous = step.setup
    # a narrow terminal: the cost prose goes under the table, step by step, before a flag or a figure is cut
    moved = narrow(t, keep=("step",), drop=("cost",), width=width)
    lines: list[Any] = [t]
    for _, cells in moved:
        lines += [Text(f"step {i} cost: {cell}", style="dim") for i, cell in enumerate(cells) if cell]
    lines.append(_verdict(report))
    lines.append(_cheapest_line(report))
    if report.rank_lesson is not None:
        r = report.rank_lesson
        lines.append(Text(
            f"Why rank comes last: rank {r.from_rank} -> {r.to_rank} alone saves "
            f"{r.saved_bytes / BYTES_PER_MB:,.0f} MB "
            f"(10^6 B; {r.trainable_from:,} -> {r.trainable_to:,} adapter parameters) against "
            f"{r.activation_bytes / BYTES_PER_GIB:.2f} GiB of activations: peak {_gib(r.peak_after_bytes)} GiB, "
            f"{'fits' if r.fits_after else 'still does not fit'}.", style="dim"))
    if report.fallback_seq_rule and any(s.action == "seq_len" for s in report.steps):
        lines.append(Text(f"Sequence length: {report.fallback_seq_rule}.", style="dim"))
    if report.skipped:
        lines.append(Text("Skipped: " + "; ".join(f"{s.action} ({s.reason})" for s in report.skipped), style="dim"))
    reserved = ("reserved = the peak allocated (torch.cuda.max_memory_allocated) + 5% + 256 MiB of allocator "
                "overhead + 512 MiB of CUDA context, what nvidia-smi shows; " if report.device == "cuda" else "")
    lines.append(Text(f"Time factors: checkpointing x{report.time_model.checkpoint_factor:.2f} "
                      f"({report.time_model.source}); others as documented in memfit.advise.costs. Fits: {reserved}"
                      "the headroom is kept free on top for the estimate's error and other processes; the same rule "
                      "as memfit estimate (memfit.estimate.fits).", style="dim"))
    return Group(*lines)


def _spec_summary(setup: Setup) -> str:
    s = setup.spec
    text = (f"{s.method}" + (f" r{s.rank}" if s.is_adapter else "") + f", {s.precision}, batch {s.batch} x "
            f"accum {s.grad_accum}, seq {s.seq}, ckpt {s.checkpointing}, {s.attention}, loss {s.loss}")
    if setup.sharding != "none":
        text += f", {setup.sharding}"
    if setup.packing:
        text += ", packed"
    return text


def _verdict(report: FitReport) -> Text:
    if report.fits_initially:
        spare = report.budget_bytes - report.initial_reserved_bytes
        return Text(f"Fits as it is: {report.rule(report.initial_peak_bytes)}; {_gib(spare)} GiB to spare.",
                    style="bold green")
    start = f"The start does not fit: {report.rule(report.initial_peak_bytes)}. "
    if report.fits:
        n = len(report.steps)
        cost = report.final_cost
        return Text(f"{start}Fits after {n} step{'s' if n != 1 else ''}: {report.rule(report.final_peak_bytes)} "
                    f"(peak {_gib(report.final_peak_bytes)} GiB); gives up {cost.gives_up}, step time "
                    f"x{cost.time_factor:.2f}.", style="bold green")
    parts = [f"{start}Nothing on the ordered path fits: the final plan: {report.rule(report.final_peak_bytes)}."]
    for label, g in (("final plan", report.smallest_gpu_final), ("spec as given", report.smallest_gpu_initial)):
        if g is not None:
            parts.append(f"Smallest GPU in the table for the {label}: {g.name} ({_gib(g.bytes)} GiB).")
        else:
            parts.append(f"No GPU in the table fits the {label}; shard over more GPUs (--gpus N).")
    return Text(" ".join(parts), style="bold red")


def _cheapest_line(report: FitReport) -> Text:
    c = report.cheapest
    if c.candidates == 0:
        return Text("Cheapest overall: search skipped (--no-search).", style="dim")
    if c.setup is None or c.cost is None or c.peak_bytes is None:
        return Text(f"Cheapest overall: none of {c.candidates:,} configurations fits.", style="red")
    change = describe_changes(report.initial, c.setup)
    needs = f" Needs: {'; '.join(c.needs)}." if c.needs else ""
    reserved = (f", reserved {_gib(reserved_bytes(c.peak_bytes, report.device))} GiB"
                if report.device == "cuda" else "")
    return Text(f"Cheapest overall ({c.candidates:,} configurations, {c.evaluated:,} estimated): {change}; "
                f"peak {_gib(c.peak_bytes)} GiB{reserved}; gives up {c.cost.gives_up}, step time "
                f"x{c.cost.time_factor:.2f}."
                + needs, style="cyan")
