"""Tables and JSON for ``memfit pack`` and ``memfit verify-pack``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.data.pack import PackResult, block_mask_bytes
from memfit.data.verify import VerifyResult
from memfit.units import human_bytes

__all__ = ["pack_json", "pack_renderable", "verify_json", "verify_renderable"]


def pack_json(result: PackResult, *, data: str, tokenizer: str, out: str | None, out_bytes: int | None,
              skipped: list[dict[str, Any]]) -> dict[str, Any]:
    """The pack summary: every field of :meth:`PackResult.to_dict` plus where it came from and went, the
    skipped records, and the bytes a materialised 4D block mask would take per row (``L * L * dtype``)."""
    d = result.to_dict()
    d.update({
        "data": data,
        "tokenizer": tokenizer,
        "out": out,
        "out_bytes": out_bytes,
        "skipped": skipped,
        "block_mask_bytes_per_row": {
            "fp32": block_mask_bytes(1, result.max_len, 4),
            "bf16": block_mask_bytes(1, result.max_len, 2),
        },
    })
    return d


def pack_renderable(result: PackResult, *, data: str, out: str | None, skipped: int) -> Group:
    t = Table(title=f"{Path(data).name} packed into rows of {result.max_len:,} tokens (largest fit with exact fit)")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row("examples", f"{result.examples:,}")
    t.add_row("rows", f"[bold]{result.n_rows:,}[/]")
    t.add_row("examples per row", f"{result.examples_per_row:.2f}")
    t.add_row("real tokens", f"{result.tokens:,}")
    t.add_row("efficiency = tokens / (rows x seq len)", f"[bold]{result.efficiency:.2%}[/]")
    t.add_row("lower bound ceil(tokens / seq len)", f"{result.lower_bound_rows:,} rows")
    t.add_row("rows vs lower bound (bound / rows)", f"{result.bound_ratio:.4%}")
    t.add_row("padding tokens", f"{result.padding_tokens:,}")
    t.add_row("tokens carrying loss (in / packed)", f"{result.loss_tokens_in:,} / {result.loss_tokens_out:,}")
    if result.overflow != "error":
        t.add_row(f"--overflow {result.overflow}", _overflow_line(result))
    if result.empty_examples:
        t.add_row("empty examples (nothing to pack)", f"{result.empty_examples:,}")
    if skipped:
        t.add_row("[yellow]records skipped on reading[/]", f"[yellow]{skipped:,}[/]")
    mask = block_mask_bytes(1, result.max_len, 2)
    t.add_row("4D block mask, if used (per row, bf16)", f"{human_bytes(mask)} ({mask:,} B; GiB = 1024^3)")
    parts: list[Table | Text] = [t]
    if out:
        parts.append(Text(f"rows written to {out}"))
    return Group(*parts)


def _overflow_line(r: PackResult) -> str:
    if r.overflow == "truncate":
        return f"{r.truncated_examples:,} examples truncated, {r.truncated_tokens:,} tokens cut"
    if r.overflow == "drop":
        return f"{r.dropped_examples:,} examples dropped, {r.dropped_tokens:,} tokens"
    return (f"{r.split_examples:,} examples split into {r.split_pieces:,} pieces, "
            f"{r.split_labels_masked:,} first labels of pieces masked")


def verify_json(result: VerifyResult, *, data: str, tokenizer: str) -> dict[str, Any]:
    d = result.to_dict()
    d.update({"data": data, "tokenizer": tokenizer})
    return d


def verify_renderable(r: VerifyResult) -> Group:
    verdict = Text("PASS", style="bold green") if r.passed else Text("FAIL", style="bold red")
    t = Table(title=f"packing verified on a tiny random Llama ({r.attn_implementation}, {r.attention}, fp32)")
    t.add_column("check")
    t.add_column("packed", justify="right")
    t.add_column("alone", justify="right")
    t.add_column("tolerance", justify="right")
    t.add_row("max |logit difference|", f"{r.max_abs_logit_diff:.2e}", "",
              f"atol {r.atol:g} + rtol {r.rtol:g}")
    t.add_row("examples whose logits differ", f"{r.examples_with_logit_diff:,} of {r.examples:,}", "", "0")
    t.add_row("token-weighted loss", f"{r.loss_packed:.6f}", f"{r.loss_alone:.6f}", f"{r.loss_atol:g}")
    t.add_row("tokens carrying loss", f"{r.loss_tokens_packed:,}", f"{r.loss_tokens_alone:,}", "equal")
    t.add_row("first labels learnt from the previous example", f"{r.first_label_leaks:,}", "", "0")
    parts: list[Table | Text] = [t, Text(f"{r.rows:,} rows, {r.examples:,} examples, {r.tokens:,} tokens, "
                                         f"rows of at most {r.max_len:,}")]
    for f in r.failures:
        parts.append(Text(f"- {f}", style="red"))
    parts.append(verdict)
    return Group(*parts)
