"""Byte units. memfit keeps bytes as integers inside and says GiB (1024**3) or GB (10**9) when it shows them."""

from __future__ import annotations

import re

from memfit.errors import MemfitError

BYTES_PER_KIB = 1024
BYTES_PER_MIB = 1024**2
BYTES_PER_GIB = 1024**3  # binary gibibyte: what nvidia-smi and torch.cuda report as "GiB"/"MiB"
BYTES_PER_MB = 10**6
BYTES_PER_GB = 10**9  # decimal gigabyte: what GPU datasheets ("80GB") and the lesson's "8.0 GB" use

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_FACTORS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(text: str) -> int:
    """Parse ``"24GiB"``, ``"80GB"``, ``"512MiB"`` or ``"1024B"`` into integer bytes. The unit is required:
    a bare ``"24"`` could mean 24 GiB, 24 GB or 24 bytes, so it is refused rather than guessed.

    >>> parse_size("24GiB")
    25769803776
    >>> parse_size("80GB")
    80000000000
    """
    m = _SIZE.match(text)
    if not m:
        raise MemfitError(f"cannot read the size {text!r}: write it like 24GiB, 80GB or 512MiB")
    if m.group(2) is None:
        n = m.group(1)
        raise MemfitError(f"the size {text.strip()!r} has no unit: write {n}GiB (1024^3 bytes, as nvidia-smi and "
                          f"torch count) or {n}GB (10^9 bytes, as datasheets do); a byte count takes B ({n}B)")
    unit = m.group(2).lower()
    return int(round(float(m.group(1)) * _FACTORS[unit]))


def gib(n_bytes: int) -> float:
    """Bytes to GiB (1024**3)."""
    return n_bytes / BYTES_PER_GIB


def gb(n_bytes: int) -> float:
    """Bytes to GB (10**9)."""
    return n_bytes / BYTES_PER_GB


def human_bytes(n_bytes: int) -> str:
    """A short binary-unit string: ``human_bytes(8_053_063_680) == '7.50 GiB'``."""
    n = float(n_bytes)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", BYTES_PER_GIB), ("MiB", BYTES_PER_MIB), ("KiB", BYTES_PER_KIB)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{int(n)} B"
