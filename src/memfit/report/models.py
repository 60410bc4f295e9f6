"""Tables and JSON for the catalogue and parameter counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from memfit.estimate import CatalogueEntry, ModelShape, ParamCount, count_params
from memfit.report._width import dropped_note, narrow
from memfit.units import BYTES_PER_GB


def models_rows(entries: Iterable[CatalogueEntry]) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        s = e.shape
        rows.append({
            "name": e.name,
            "model_type": s.model_type,
            "parameters": count_params(s).total,
            "layers": s.n_layers,
            "hidden": s.hidden,
            "heads": s.n_heads,
            "kv_heads": s.n_kv_heads,
            "intermediate": s.intermediate,
            "vocab": s.vocab,
            "experts": s.n_experts,
            "source": e.source,
        })
    return rows


def models_table(rows: list[dict[str, Any]], width: int | None = None) -> Table:
    """The catalogue; in a narrow terminal the type, heads/kv, hidden and vocab columns go (in that order)
    before a name or a parameter count is cut (the caption says which)."""
    t = Table(title="memfit catalogue (bf16 weights in GB = 10^9 bytes)")
    for col in ("name", "type", "parameters", "layers", "hidden", "heads/kv", "vocab", "bf16 weights"):
        t.add_column(col, justify="left" if col in ("name", "type") else "right")
    for r in rows:
        t.add_row(r["name"], r["model_type"], f"{r['parameters']:,}", str(r["layers"]), str(r["hidden"]),
                  f"{r['heads']}/{r['kv_heads']}", f"{r['vocab']:,}", f"{2 * r['parameters'] / BYTES_PER_GB:.2f} GB")
    dropped = narrow(t, keep=("name", "parameters", "bf16 weights"), drop=("type", "heads/kv", "hidden", "vocab"),
                     width=width)
    t.caption = dropped_note(dropped)
    return t


def params_json(shape: ModelShape, counts: ParamCount) -> dict[str, Any]:
    return {
        "model": shape.name,
        "model_type": shape.model_type,
        "total": counts.total,
        "trainable_default": counts.trainable_default,
        "embeddings": counts.embeddings,
        "lm_head": counts.lm_head,
        "per_layer": counts.per_layer,
        "layers": counts.layers,
        "n_layers": shape.n_layers,
        "by_kind": counts.by_kind,
    }


def params_table(shape: ModelShape, counts: ParamCount) -> Table:
    t = Table(title=f"{shape.name}: {counts.total:,} parameters ({shape.n_layers} layers, hidden {shape.hidden})")
    t.add_column("module kind")
    t.add_column("parameters", justify="right")
    t.add_column("share", justify="right")
    t.add_column("bf16 bytes", justify="right")
    for kind, n in counts.by_kind.items():
        t.add_row(kind, f"{n:,}", f"{n / counts.total:.1%}", f"{2 * n:,}")
    t.add_row("[bold]total[/]", f"[bold]{counts.total:,}[/]", "100.0%", f"{2 * counts.total:,}")
    return t
