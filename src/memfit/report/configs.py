"""The import table of ``--config``: ``field -> value -> memfit setting | ignored | NOT MODELLED``, and what
``fit --write`` wrote."""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from memfit.configs import SpecImport, WriteResult

STYLE = {"setting": "green", "ignored": "dim", "NOT MODELLED": "bold yellow"}


def _short(value: Any, width: int = 48) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def config_import_table(si: SpecImport) -> Table:
    """Every row that sets or is not modelled; the ignored fields in one caption line."""
    files = "; ".join(f"{f.path} ({f.kind}, {f.version}"
                      + (f", named by {f.referenced_by}" if f.referenced_by else "") + ")"
                      for f in si.imported.files)
    ignored = [r.field for r in si.rows if r.status == "ignored"]
    notes = [f.note for f in si.imported.files if f.note]
    caption = (f"ignored (no memory effect): {', '.join(ignored)}" if ignored else "")
    if notes:
        caption = "\n".join([caption, *notes]) if caption else "\n".join(notes)
    t = Table(title=f"read from {escape(files)}", caption=escape(caption) or None, caption_justify="left")
    several = len({r.file for r in si.rows}) > 1
    t.add_column("file:line" if several else "line", no_wrap=True)
    t.add_column("field", no_wrap=True, overflow="ellipsis", max_width=34)
    t.add_column("value", no_wrap=True, overflow="ellipsis", max_width=28)
    t.add_column("memfit setting", no_wrap=True, overflow="ellipsis", max_width=30)
    t.add_column("status", no_wrap=True)
    t.add_column("note", overflow="fold", ratio=1)
    for r in si.rows:
        if r.status == "ignored":
            continue
        place = f"{_name(r.file)}:" if several else ""
        where = f"{place}{r.line}" if r.line else f"{place}default" if r.default else place.rstrip(":") or "-"
        setting = f"{r.setting} = {_short(r.memfit_value, 40)}" if r.setting else ""
        style = STYLE[r.status]
        t.add_row(escape(where), escape(r.field), escape(_short(r.value)), escape(setting),
                  f"[{style}]{r.status}[/]", escape(r.note))
    return t


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def spec_line(si: SpecImport) -> str:
    """The RunSpec the files gave, in flag terms."""
    s = si.spec
    model = f"model {si.model}; " if si.model else ""
    targets = ",".join(s.targets) or "PEFT default"
    adapter = f" rank {s.rank} alpha {s.alpha} targets {targets}," if s.is_adapter else ""
    return (f"{model}{s.method},{adapter} {s.precision}, {s.optimizer}, batch {s.batch} x seq {s.seq}, grad_accum "
            f"{s.grad_accum}, checkpointing {s.checkpointing}{' + offload' if s.offload else ''}, {s.attention}, "
            f"loss {s.loss}")


def written_lines(wr: WriteResult) -> list[str]:
    """What ``fit --write`` changed, and what it could not."""
    out = [f"wrote {wr.path} (a copy of {wr.source} with {len(wr.edits)} field(s) changed)"]
    out += [f"  {e.field}: {json.dumps(e.value)}  ({e.reason})" for e in wr.edits]
    out += [f"  not written: {n}" for n in wr.not_written]
    return out
