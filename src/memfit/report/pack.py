"""Tables and JSON for ``memfit pack`` and ``memfit verify-pack``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.data.pack import PackResult
from memfit.data.tokenizer import SpecialTokens
from memfit.estimate.attention_mask import block_mask_bytes
from memfit.report.lengths import special_tokens_line
from memfit.units import human_bytes

if TYPE_CHECKING:  # verify-pack's result; the module needs torch, which `memfit pack` does not
    from memfit.data.torch.verify import VerifyResult

__all__ = ["pack_json", "pack_renderable", "verify_json", "verify_renderable"]


def pack_json(result: PackResult, *, data: str, tokenizer: str, out: str | None, out_bytes: int | None,
              skipped: list[dict[str, Any]], special_tokens: SpecialTokens | None = None,
              mode: str | None = None) -> dict[str, Any]:
    """The pack summary: every field of :meth:`PackResult.to_dict` (with ``accounting``: examples, tokens and
    loss tokens in, out and why each left) plus where it came from and went, the skipped records, the special
    tokens rule, and the bytes a materialised 4D block mask would take per row (``L * L * dtype``)."""
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
    if special_tokens is not None:
        d["special_tokens"] = special_tokens.to_dict()
    if mode is not None:
        d["mode"] = mode
    return d


def pack_renderable(result: PackResult, *, data: str, out: str | None, skipped: int,
                    special_tokens: SpecialTokens | None = None, mode: str = "prompt_completion") -> Group:
    """The rows and their efficiency, then what went in and what came out: examples, tokens and loss tokens,
    with every difference under its reason."""
    t = Table(title=f"{Path(data).name} packed into rows of {result.max_len:,} tokens (largest fit with exact fit)")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row("rows", f"[bold]{result.n_rows:,}[/]")
    t.add_row("examples per row", f"{result.examples_per_row:.2f}")
    t.add_row("efficiency = tokens / (rows x seq len)", f"[bold]{result.efficiency:.2%}[/]")
    t.add_row("lower bound ceil(tokens / seq len)", f"{result.lower_bound_rows:,} rows")
    t.add_row("rows vs lower bound (bound / rows)", f"{result.bound_ratio:.4%}")
    t.add_row("padding tokens", f"{result.padding_tokens:,}")
    mask = block_mask_bytes(1, result.max_len, 2)
    t.add_row("4D block mask, if used (per row, bf16)", f"{human_bytes(mask)} ({mask:,} B; GiB = 1024^3)")

    acc = result.accounting()
    io = Table(title=f"in and out (--overflow {result.overflow})")
    io.add_column("")
    io.add_column("in", justify="right")
    io.add_column("packed", justify="right")
    io.add_column("left out", justify="right")
    io.add_column("why", justify="left")
    for name, label in (("examples", "examples"), ("tokens", "tokens"), ("loss_tokens", "tokens carrying loss")):
        row = acc[name]
        gone = row["in"] - row["out"]
        style = "yellow" if gone else ""
        io.add_row(label, f"{row['in']:,}", f"{row['out']:,}",
                   f"[{style}]{gone:,}[/]" if style else "0", _why(name, row, result))
    parts: list[Table | Text] = [t, io]
    if result.truncated_examples:
        parts.append(Text(f"--overflow truncate: {result.truncated_examples:,} examples cut to their first "
                          f"{result.max_len:,} tokens"))
    if result.split_examples:
        parts.append(Text(f"--overflow split: {result.split_examples:,} examples cut into {result.split_pieces:,} "
                          f"pieces; each piece is its own sequence and does not see the one before it"))
    if skipped:
        parts.append(Text(f"{skipped:,} records skipped on reading (see --json for each line and reason)",
                          style="yellow"))
    if special_tokens is not None:
        parts.append(Text(special_tokens_line(special_tokens, mode)))
    if out:
        parts.append(Text(f"rows written to {out}"))
    return Group(*parts)


_REASONS = {
    "empty": "empty",
    "truncated": "truncated",
    "dropped_too_long": "too long, dropped",
    "no_loss_token": "no loss token left",
    "split_first_label_masked": "split pieces' first labels",
}


def _why(name: str, row: dict[str, int], result: PackResult) -> str:
    parts = [f"{row[k]:,} {_REASONS[k]}" for k in row if k not in ("in", "out") and row[k]]
    if name == "tokens" and result.no_loss_pieces:
        parts.append(f"({result.no_loss_pieces:,} split pieces)")
    return "; ".join(parts)


def verify_json(result: VerifyResult, *, data: str, tokenizer: str,
                special_tokens: SpecialTokens | None = None) -> dict[str, Any]:
    d = result.to_dict()
    d.update({"data": data, "tokenizer": tokenizer})
    if special_tokens is not None:
        d["special_tokens"] = special_tokens.to_dict()
    return d


def verify_renderable(r: VerifyResult, special_tokens: SpecialTokens | None = None,
                      mode: str = "prompt_completion") -> Group:
    verdict = Text("PASS", style="bold green") if r.passed else Text("FAIL", style="bold red")
    t = Table(title=f"packing verified on a tiny random Llama ({r.attn_implementation} attention, --mask {r.mask}, "
                    "fp32)")
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
    if special_tokens is not None:
        parts.append(Text(special_tokens_line(special_tokens, mode)))
    for f in r.failures:
        parts.append(Text(f"- {f}", style="red"))
    parts.append(verdict)
    return Group(*parts)
