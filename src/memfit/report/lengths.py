"""Tables and the histogram for ``memfit lengths``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.data.lengths import LengthReport
from memfit.data.tokenizer import SpecialTokens
from memfit.errors import MemfitError
from memfit.files import atomic_output, check_output
from memfit.report._width import narrow
from memfit.units import human_bytes

__all__ = ["check_plot_path", "lengths_renderable", "plot_lengths", "special_tokens_line"]

_STRATEGY_HELP = {
    "random": "random",
    "grouped": "grouped by length",
    "packed": "packed (exact-fit packer)",
}


def special_tokens_line(rule: SpecialTokens, mode: str) -> str:
    """What each example ends with, and the rule it came from (:mod:`memfit.data.tokenizer`)."""
    if mode == "messages":
        return (f"special tokens: as the chat template writes them; nothing is appended to a chat (the EOS rule, "
                f"{rule.eos or 'none'} from {rule.source}, applies to text and prompt/completion data)")
    return f"special tokens: {rule.describe()}"


def lengths_renderable(r: LengthReport) -> Group:
    """The people's view: distribution, truncation and loss tokens, padding per strategy, activations."""
    parts: list[Table | Text] = []
    t = Table(title=f"{Path(r.source).name}: tokens per example ({r.tokenizer}, {r.mode.replace('_', '/')})")
    t.add_column("statistic")
    t.add_column("tokens", justify="right")
    t.add_row("examples", f"{r.count:,}")
    t.add_row("min", f"{r.min:,}")
    t.add_row("mean", f"{r.mean:,.1f}")
    for name, value in r.percentiles.items():
        bold = name == "p95"
        t.add_row(f"[bold]{name}[/]" if bold else name, f"[bold]{value:,}[/]" if bold else f"{value:,}")
    t.add_row("max", f"{r.max:,}")
    t.add_row("total tokens", f"{r.total_tokens:,}")
    if r.loss_tokens is not None:
        share = r.loss_tokens / r.total_tokens if r.total_tokens else 0.0
        t.add_row("tokens carrying loss", f"{r.loss_tokens:,} ({share:.1%})")
    narrow(t, keep=("statistic",))
    parts.append(t)

    cut = Table(title="sequence length")
    cut.add_column("seq len")
    cut.add_column("examples longer", justify="right")
    cut.add_column("tokens truncated", justify="right")
    cut.add_row(f"--seq-len {r.seq_len:,}", f"{r.over_seq_len:,} ({r.over_seq_len / r.count:.2%})",
                f"{r.truncated_tokens:,}" + (f" ({r.loss_tokens_truncated:,} carrying loss)"
                                             if r.loss_tokens_truncated is not None else ""))
    cut.add_row(f"[bold]{r.recommended_seq_len:,}[/] (p95 up to x64)",
                f"{r.recommended_over:,} ({r.recommended_truncated_share:.2%})", f"{r.recommended_truncated_tokens:,}")
    narrow(cut, keep=())
    parts.append(cut)

    pad = Table(title=f"padding at micro-batch {r.padding.batch} (random = Trainer default, grouped = "
                      f"group_by_length, packed = memfit's exact-fit packer into rows of {r.seq_len:,})")
    pad.add_column("strategy")
    pad.add_column("padding waste", justify="right")
    pad.add_column("tokens processed", justify="right")
    pad.add_column("rows x micro-batches", justify="right")
    pad.add_column("longest/mean row", justify="right")
    for s in r.padding.strategies():
        pad.add_row(_STRATEGY_HELP[s.strategy], f"{s.waste:.1%}", f"{s.processed_tokens:,}",
                    f"{s.batch} x {s.micro_batches:,}",
                    f"{s.peak_len:,}/{s.mean_len:,.0f}")
    narrow(pad, keep=())
    parts.append(pad)

    if r.activations:
        act = Table(title=f"activation memory of {r.model} by strategy (estimate; GiB = 1024^3 bytes)")
        act.add_column("strategy")
        act.add_column("b x longest", justify="right")
        act.add_column("activations", justify="right")
        act.add_column("b x mean", justify="right")
        act.add_column("activations (mean step)", justify="right")
        act.add_column("estimated peak", justify="right")
        for a in r.activations:
            act.add_row(_STRATEGY_HELP[a.strategy], f"{a.batch} x {a.peak_len:,}", human_bytes(a.activation_bytes_peak),
                        f"{a.batch} x {a.mean_len:,}", human_bytes(a.activation_bytes_mean), human_bytes(a.peak_bytes))
        narrow(act, keep=())
        parts.append(act)

    if r.special_tokens is not None:
        parts.append(Text(special_tokens_line(r.special_tokens, r.mode)))
    if r.skipped:
        first = ", ".join(f"line {s.line}: {s.reason}" for s in r.skipped[:3])
        more = f" (and {len(r.skipped) - 3} more)" if len(r.skipped) > 3 else ""
        parts.append(Text(f"skipped {len(r.skipped):,} record(s): {first}{more}", style="yellow"))
    parts.append(Text(f"p95 = {r.p95:,} tokens: train at --seq-len {r.recommended_seq_len:,}, which truncates "
                      f"{r.recommended_truncated_share:.1%} of the examples.", style="bold"))
    return Group(*parts)


def _pyplot() -> object:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MemfitError("--plot needs matplotlib", hint="pip install 'memfit[plot]'") from exc
    return plt


def check_plot_path(path: str | Path, *, force: bool = False) -> Path:
    """Check before any work that ``--plot PATH`` can be written: an image suffix matplotlib can write (none
    means PNG), and what :func:`memfit.files.check_output` checks (not a directory, an existing folder that
    takes new files, an existing file only with ``force``). Returns the path; raises a MemfitError naming the
    fix. ``memfit lengths --plot`` and ``memfit measure --plot`` both check here."""
    plt: Any = _pyplot()
    out = Path(path)
    suffix = out.suffix.lower().lstrip(".")
    if suffix:
        fig = plt.figure()
        try:
            formats = sorted(fig.canvas.get_supported_filetypes())
        finally:
            plt.close(fig)
        if suffix not in formats:
            raise MemfitError(f"--plot {out}: matplotlib cannot write .{suffix} files; end the name in .png "
                              f"(or one of: {', '.join('.' + f for f in formats)})")
    return check_output(out, flag="--plot", force=force, example="plot.png")


def save_figure(fig: Any, path: str | Path, *, force: bool = False, dpi: float | None = None) -> Path:
    """``fig.savefig`` through :func:`memfit.files.atomic_output` (the temporary file keeps the suffix, so the
    format is the one the name asks for, PNG when it has none); an interrupt or a failed write leaves no file."""
    target = Path(path)
    with atomic_output(target, flag="--plot", force=force, example="plot.png") as tmp:
        try:
            fig.savefig(tmp, dpi=dpi or "figure", format=None if target.suffix else "png")
        except ValueError as exc:  # a format matplotlib cannot write
            raise MemfitError(f"cannot write the plot to {target}: {exc}", hint="end the name in .png") from exc
    return target


def plot_lengths(r: LengthReport, path: str | Path, *, force: bool = False) -> Path:
    """A histogram of the lengths with p95 and max marked, written to ``path`` (PNG unless its suffix names
    another image format matplotlib writes) atomically (:func:`save_figure`)."""
    out = check_plot_path(path, force=force)
    plt: Any = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.hist(r.lengths, bins=min(80, max(10, r.count // 20)), color="#4c72b0", alpha=0.85)
    ax.axvline(r.p95, color="#dd8452", linestyle="--", linewidth=2, label=f"p95 = {r.p95:,}")
    ax.axvline(r.max, color="#c44e52", linestyle=":", linewidth=2, label=f"max = {r.max:,}")
    if r.recommended_seq_len != r.p95:
        ax.axvline(r.recommended_seq_len, color="#55a868", linewidth=1.5,
                   label=f"recommended seq len = {r.recommended_seq_len:,}")
    ax.set_xlabel(f"tokens per example ({r.tokenizer})")
    ax.set_ylabel("examples")
    ax.set_title(f"{Path(r.source).name}: {r.count:,} examples")
    ax.legend()
    fig.tight_layout()
    try:
        return save_figure(fig, out, force=force)
    finally:
        plt.close(fig)
