"""GPUs: a bundled table of accelerator memory sizes with their datasheet sources (``gpus.json``).

Memory sizes are given as the vendor sells them and converted to bytes the way the device reports them:
NVIDIA's "80GB" on an A100/H100 is 80 GiB = 85,899,345,920 bytes (``torch.cuda.get_device_properties(0)
.total_memory`` reports 85,899,345,920 - a little less usable after the driver's reservations), so the
table stores ``gib`` for those. A size typed by the user keeps its unit: ``24GiB`` = 24 x 1024^3 bytes,
``80GB`` = 80 x 10^9 bytes.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from memfit.errors import MemfitError
from memfit.units import BYTES_PER_GIB, parse_size


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One accelerator's memory: ``bytes`` as the device reports it, with where that figure comes from."""

    name: str
    bytes: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "source": self.source}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@cache
def gpu_table() -> tuple[GpuSpec, ...]:
    """Every bundled GPU, smallest memory first."""
    text = resources.files("memfit.estimate").joinpath("gpus.json").read_text(encoding="utf-8")
    rows = json.loads(text)
    out = [GpuSpec(name=r["name"], bytes=int(round(float(r["gib"]) * BYTES_PER_GIB)), source=r["source"]) for r in rows]
    return tuple(sorted(out, key=lambda g: (g.bytes, g.name)))


@cache
def _aliases() -> dict[str, GpuSpec]:
    text = resources.files("memfit.estimate").joinpath("gpus.json").read_text(encoding="utf-8")
    by_name = {g.name: g for g in gpu_table()}
    out: dict[str, GpuSpec] = {}
    for r in json.loads(text):
        g = by_name[r["name"]]
        for alias in [r["name"], *r.get("aliases", [])]:
            out[_norm(alias)] = g
    return out


def resolve_gpu(text: str) -> GpuSpec:
    """A table name (``"H100-80GB"``, ``"rtx4090"``, case and punctuation ignored) or a size (``"24GiB"``).

    >>> resolve_gpu("A100-80GB").bytes
    85899345920
    >>> resolve_gpu("80GB").bytes
    80000000000
    """
    key = _norm(text)
    if not key:
        raise MemfitError("--gpu is empty: pass a GPU name (see `memfit gpus`) or a size such as 24GiB")
    table = _aliases()
    if key in table:
        return table[key]
    if re.match(r"^\s*[0-9]*\.?[0-9]+\s*([KMGT]i?B|B)?\s*$", text, re.IGNORECASE):
        n = parse_size(text)
        if n <= 0:
            raise MemfitError(f"--gpu {text!r} is not a positive size: write it like 24GiB or 80GB")
        return GpuSpec(name=text.strip(), bytes=n, source="size given on the command line")
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(sorted({table[c].name for c in close}))}? " if close else ""
    raise MemfitError(f"unknown GPU {text!r}: {hint}`memfit gpus` lists the table; a size such as 24GiB or "
                      "80GB also works")


def smallest_fitting_gpu(n_bytes: int) -> GpuSpec | None:
    """The smallest bundled GPU with at least ``n_bytes``, or None when none has enough."""
    for g in gpu_table():
        if g.bytes >= n_bytes:
            return g
    return None
