"""Pieces every command's page uses: the run summary, the GPU line, the table of bytes by category."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memfit.errors import MemfitError
from memfit.report.html.axis import Capacity
from memfit.report.html.figures import JsonPath, figure, human
from memfit.report.html.markup import Html, el
from memfit.report.html.page import table
from memfit.report.html.palette import colour, label, ordered


def spec_summary(spec: Mapping[str, Any] | None) -> str:
    """``lora r16, bf16, adamw, batch 4 x seq 2048, checkpointing none, sdpa on cuda``."""
    if not spec:
        return ""
    method = str(spec.get("method", "?"))
    if method in ("lora", "qlora") and spec.get("rank"):
        method += f" r{spec['rank']}"
    ckpt = spec.get("checkpointing", "none")
    if ckpt == "every-k":
        ckpt = f"every-{spec.get('checkpoint_every')}"
    parts = [method, str(spec.get("precision", "?")), str(spec.get("optimizer", "?")),
             f"batch {spec.get('batch')} x seq {spec.get('seq')}"]
    if spec.get("grad_accum", 1) not in (1, None):
        parts.append(f"grad_accum {spec['grad_accum']}")
    parts += [f"checkpointing {ckpt}", f"{spec.get('attention', '?')} attention on {spec.get('device', '?')}"]
    if spec.get("loss") not in (None, "standard"):
        parts.append(f"loss {spec['loss']}")
    return ", ".join(parts)


def gpu_capacity(gpu: Mapping[str, Any] | None = None, gpu_bytes: int | None = None,
                 spec: Mapping[str, Any] | None = None) -> Capacity | None:
    """The GPU line: from the JSON's ``gpu`` object, else ``gpu_bytes`` with the spec's ``--gpu`` as its name,
    else the spec's ``--gpu`` looked up in memfit's GPU table (None when there is no GPU at all)."""
    if gpu and gpu.get("bytes"):
        return Capacity(f"GPU {gpu.get('name', '')}".strip(), int(gpu["bytes"]))
    name = (spec or {}).get("gpu")
    if gpu_bytes:
        return Capacity(f"GPU {name}" if name else "GPU", int(gpu_bytes))
    if name:
        from memfit.estimate import resolve_gpu

        try:
            g = resolve_gpu(str(name))
        except MemfitError:
            return None
        return Capacity(f"GPU {g.name}", g.bytes)
    return None


def category_table(parts: Mapping[str, int], path: JsonPath, *, total: int | None = None,
                   total_path: JsonPath | None = None, total_label: str = "total",
                   caption: str | None = None) -> Html:
    """Category, exact bytes, GiB, share of the total; categories with 0 bytes are left out."""
    whole = total if total is not None else sum(parts.values())
    rows: list[Sequence[str]] = []
    for cat in ordered(parts):
        v = int(parts[cat])
        if v == 0:
            continue
        swatch = el("span", [el("i", "", class_="sw", style=f"background:{colour(cat)}"), label(cat)], class_="cat")
        rows.append([swatch, figure(v, [*path, cat], "B"), figure(v, [*path, cat], "GiB"),
                     f"{v / whole:.1%}" if whole else "-"])
    if total is not None:
        tp = total_path or []
        rows.append([total_label, figure(total, tp, "B") if tp else f"{total:,} B",
                     figure(total, tp, "GiB") if tp else human(total), "100.0%"])
    return table(["category", "bytes", "GiB", "share"], rows, numeric=(1, 2, 3), caption=caption,
                 total_last=total is not None)


def require(data: Mapping[str, Any], *keys: str, what: str) -> None:
    """Raise one clear error when the JSON lacks a key this page needs."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise MemfitError(f"this {what} JSON has no {', '.join(repr(k) for k in missing)}: pass the unedited "
                          f"output of `memfit {what} --json`")


def fits_text(fits: bool | None, spare: int | None) -> tuple[str, str | None]:
    """A verdict for a KPI: ``("fits, 3.21 GiB spare", "ok")`` / ``("short by 49.03 GiB", "bad")``."""
    if fits is None or spare is None:
        return ("no GPU given", None)
    if spare >= 0:
        return (f"fits, {human(spare)} spare", "ok")
    return (f"short by {human(-spare)}", "bad")
