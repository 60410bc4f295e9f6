"""The import table of ``--config``: ``field -> value -> memfit setting | ignored | NOT MODELLED``, and what
``fit --write`` wrote. Every row, with its note, is in ``--json``'s ``config_import``; the table for people
shows the settings and the NOT MODELLED rows, with the caveats below it and the ignored fields in one line."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from memfit.configs import ConfigRow, SpecImport, WriteResult
from memfit.report._width import narrow

STYLE = {"setting": "green", "ignored": "dim", "NOT MODELLED": "bold yellow"}
NO_EFFECT = "no memory effect"


def _short(value: Any, width: int = 0) -> str:
    """A value as the table shows it: whole (a narrow column wraps it; it is never cut)."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _files(si: SpecImport) -> dict[str, int]:
    """File path -> its number in the title (1, 2, ...), in reading order."""
    out: dict[str, int] = {}
    for f in si.imported.files:
        out.setdefault(f.path, len(out) + 1)
    for r in si.rows:
        out.setdefault(r.file, len(out) + 1)
    return out


def _where(r: ConfigRow, numbers: dict[str, int]) -> str:
    n = f"{numbers[r.file]}:" if len(numbers) > 1 else ""
    return f"{n}{r.line}" if r.line else f"{n}default" if r.default else n.rstrip(":") or "-"


def config_import_table(si: SpecImport) -> Table:
    """The setting and NOT MODELLED rows; files numbered in the title when there are several."""
    numbers = _files(si)
    kinds = {f.path: f for f in si.imported.files}
    heads = []
    for path, n in numbers.items():
        f = kinds.get(path)
        what = f" ({f.version}" + (f", named by {f.referenced_by}" if f.referenced_by else "") + ")" if f else ""
        heads.append((f"[{n}] " if len(numbers) > 1 else "") + path + what)
    t = Table(title="read from " + escape("; ".join(heads)), title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("line", no_wrap=True)
    t.add_column("field")
    t.add_column("value", max_width=40)
    t.add_column("memfit setting")
    t.add_column("status", no_wrap=True)
    for r in si.rows:
        if r.status == "ignored":
            continue
        setting = f"{r.setting} = {_short(r.memfit_value, 28)}" if r.setting else ""
        t.add_row(escape(_where(r, numbers)), escape(r.field), escape(_short(r.value, 24)), escape(setting),
                  f"[{STYLE[r.status]}]{r.status}[/]")
    narrow(t, keep=("line", "field", "status"))
    return t


def config_import_notes(si: SpecImport) -> list[str]:
    """The caveats: each NOT MODELLED row's reason, the kind-detection notes, and the ignored fields."""
    numbers = _files(si)
    out = [f"  {_where(r, numbers)} {r.field}: {r.note}" for r in si.rows if r.status == "NOT MODELLED" and r.note]
    out += [f"  {f.note}" for f in si.imported.files if f.note]
    plain = [r.field for r in si.rows if r.status == "ignored" and r.note == NO_EFFECT]
    other = [f"{r.field} ({r.note})" for r in si.rows if r.status == "ignored" and r.note != NO_EFFECT]
    if plain or other:
        out.append("ignored: " + ", ".join(plain + other) if not plain else
                   f"ignored (no memory effect): {', '.join(plain)}" + (f"; {', '.join(other)}" if other else ""))
    if out and out[0].startswith("  "):
        out.insert(0, "not modelled / notes:")
    return out


def spec_line(si: SpecImport) -> str:
    """The RunSpec the files gave, in flag terms."""
    s = si.spec
    model = f"model {si.model}; " if si.model else ""
    targets = ",".join(s.targets) or "PEFT default"
    dora = " dora" if s.use_dora else ""
    adapter = f" rank {s.rank} alpha {s.alpha} targets {targets}{dora}," if s.is_adapter else ""
    return (f"{model}{s.method},{adapter} {s.precision}, {s.optimizer}, batch {s.batch} x seq {s.seq}, grad_accum "
            f"{s.grad_accum}, checkpointing {s.checkpointing}{' + offload' if s.offload else ''}, {s.attention}, "
            f"loss {s.loss}")


def written_lines(wr: WriteResult) -> list[str]:
    """What ``fit --write`` changed, and what it could not."""
    out = [f"wrote {wr.path} (a copy of {wr.source} with {len(wr.edits)} field(s) changed)"]
    out += [f"  {e.field}: {json.dumps(e.value)}  ({e.reason})" for e in wr.edits]
    out += [f"  not written: {n}" for n in wr.not_written]
    return out
