"""``memfit lab``'s presentation: each rep's claim beside what was measured, its verdict and the command that
reproduces it, as a rich table (the terminal), markdown (``bench/RESULTS.md``) and, in
:mod:`memfit.report.html.pages.lab`, the HTML page. Everything reads the lab's ``to_dict()`` output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.markup import escape
from rich.table import Table

VERDICT_STYLE = {"holds": "green", "holds with a different constant": "yellow", "does not hold here": "red",
                 "not run": "dim"}


def lab_heading(d: Mapping[str, Any]) -> str:
    """What ran, where, and how long it took."""
    env = d.get("environment") or {}
    where = (f"a scaled {d['model']} (hidden {d['config'].get('hidden_size')}, vocabulary "
             f"{d['config'].get('vocab_size'):,}, {d['spec']['precision']}; depth varied in rep 4) on {d['device']}"
             if d.get("scaled") else f"{d['model']} on {d['device']}")
    return (f"memfit lab: the lesson's claims measured on {where}; {len(d['reps'])} reps in {d['seconds']:.0f} s "
            f"wall-clock, {float(d.get('cpu_seconds') or 0):.0f} s of CPU "
            f"(torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, {env.get('threads', '?')} "
            "threads)")


def lab_table(d: Mapping[str, Any]) -> Table:
    """Claim, measured, verdict per rep; the commands follow the table (:func:`lab_commands`), whole."""
    t = Table(title=lab_heading(d), show_lines=True, title_justify="left")
    for name, kw in (("#", {"justify": "right"}), ("claim", {"ratio": 3}), ("measured", {"ratio": 5}),
                     ("verdict", {"ratio": 1})):
        t.add_column(name, **kw)  # type: ignore[arg-type]
    for r in d["reps"]:
        style = VERDICT_STYLE.get(r["verdict"], "")
        t.add_row(str(r["number"]), f"[bold]{escape(r['title'])}[/]\n{escape(r['claim'])}",
                  f"{escape(r['measured'])} [dim]({r['how']}, {r['seconds']:.0f} s)[/]", f"[{style}]{r['verdict']}[/]")
    return t


def lab_commands(d: Mapping[str, Any]) -> list[str]:
    """``rep N: COMMAND``, one line per rep (printed unwrapped: a path or a flag is never cut)."""
    return [f"rep {r['number']}: {r['command']}" for r in d["reps"]]


def lab_markdown(d: Mapping[str, Any]) -> str:
    """The lab as a markdown section: the heading line, then one row per rep."""
    lines = [lab_heading(d) + ".", "", "| # | claim | measured | verdict | reproduce |", "|---:|---|---|---|---|"]
    for r in d["reps"]:
        cells = [str(r["number"]), f"**{r['title']}**: {r['claim']}", f"{r['measured']} ({r['how']}, "
                 f"{r['seconds']:.0f} s)", r["verdict"], f"`{r['command']}`"]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"
