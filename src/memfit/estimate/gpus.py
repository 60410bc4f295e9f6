"""GPUs: a bundled table of accelerator memory sizes with their sources (``gpus.json``).

Each row cites two figures, each with its unit as printed where it comes from:

``datasheet``
    what the vendor sells, in decimal-looking GB ("16 GB" for a T4, "80 GB" for an A100), shown for
    recognition only: vendors' "GB" is sometimes 10^9 B and sometimes 1024^3 B, so it is never converted.
``memory``
    what the device reports as its total, in the unit the tool prints (``nvidia-smi --query-gpu=
    memory.total`` in MiB, ``rocm-smi`` in bytes). ``bytes`` is derived from this figure and nothing else:
    "15,360 MiB" on a T4 = 15,360 x 1024^2 = 16,106,127,360 B = 15.00 GiB, although the T4 is sold as a
    "16 GB" card. That total is what ``nvidia-smi`` counts used memory against, CUDA context included, so
    memfit compares it with the step's reserved bytes (:mod:`memfit.estimate.fits`).

``tests/estimate/test_gpus.py`` recomputes every row's bytes from its cited text. A size typed by the
user keeps its unit: ``24GiB`` = 24 x 1024^3 bytes, ``80GB`` = 80 x 10^9 bytes; a bare number is refused.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from memfit.errors import MemfitError
from memfit.units import parse_size


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One accelerator's memory: ``bytes`` as the device reports it, with where that figure comes from."""

    name: str
    bytes: int
    source: str
    memory: str | None = None  # the cited figure ``bytes`` comes from, with its unit ("15,360 MiB")
    datasheet: str | None = None  # the vendor's figure, with its unit ("16 GB")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "source": self.source, "memory": self.memory,
                "datasheet": self.datasheet}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@cache
def gpu_table() -> tuple[GpuSpec, ...]:
    """Every bundled GPU, smallest memory first."""
    text = resources.files("memfit.estimate").joinpath("gpus.json").read_text(encoding="utf-8")
    rows = json.loads(text)
    out = [GpuSpec(name=r["name"], bytes=figure_bytes(r["memory"]), source=r["source"], memory=r["memory"],
                   datasheet=r["datasheet"]) for r in rows]
    return tuple(sorted(out, key=lambda g: (g.bytes, g.name)))


def figure_bytes(figure: str) -> int:
    """Bytes of a cited memory figure with thousands separators and its unit: ``"15,360 MiB"`` ->
    16,106,127,360; ``"205,822,885,888 B"`` -> 205,822,885,888.

    >>> figure_bytes("81,920 MiB") == 80 * 1024**3
    True
    """
    return parse_size(figure.replace(",", ""))


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
    if re.match(r"^\s*[0-9]*\.?[0-9]+\s*$", text):
        raise MemfitError(f"--gpu {text.strip()} has no unit: write {text.strip()}GiB (1024^3 bytes, as nvidia-smi "
                          f"counts) or {text.strip()}GB (10^9 bytes, as datasheets do), or a GPU name (memfit gpus)")
    if re.match(r"^\s*[0-9]*\.?[0-9]+\s*([KMGT]i?B|B)\s*$", text, re.IGNORECASE):
        n = parse_size(text)
        if n <= 0:
            raise MemfitError(f"--gpu {text!r} is not a positive size: write it like 24GiB or 80GB")
        return GpuSpec(name=text.strip(), bytes=n, source="size given on the command line")
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(sorted({table[c].name for c in close}))}? " if close else ""
    raise MemfitError(f"unknown GPU {text!r}: {hint}`memfit gpus` lists the table; a size such as 24GiB or "
                      "80GB also works")


def smallest_fitting_gpu(fits: Callable[[GpuSpec], bool]) -> GpuSpec | None:
    """The smallest bundled GPU for which ``fits(gpu)``, or None when none does (the rule itself is
    :meth:`memfit.estimate.fits.Target.fits`; :func:`memfit.estimate.fits.smallest_gpu` applies it).

    >>> smallest_fitting_gpu(lambda g: g.bytes >= 40 * 1024**3).bytes >= 40 * 1024**3
    True
    """
    for g in gpu_table():
        if fits(g):
            return g
    return None
