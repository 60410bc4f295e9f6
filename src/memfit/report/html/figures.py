"""Figures as text, always with their unit: exact bytes, GiB (1024^3 B), GB (10^9 B), shares, ratios.

A figure taken from the JSON is wrapped by :func:`figure` in a ``<span data-json='["path", 0, "key"]'
data-unit="GiB">`` (its path as a JSON list of keys and indices), so a test can read every number on the
page back and compare it with the JSON it came from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from memfit.report.html.markup import Html, el
from memfit.units import BYTES_PER_GB, BYTES_PER_GIB, BYTES_PER_KIB, BYTES_PER_MIB

BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", BYTES_PER_GIB), ("MiB", BYTES_PER_MIB),
                                             ("KiB", BYTES_PER_KIB), ("B", 1))
"""Binary units, largest first (GiB = 1024^3 B: what torch.cuda and nvidia-smi report)."""
UNIT_FACTORS: dict[str, float] = {**dict(BINARY_UNITS), "GB": BYTES_PER_GB, "%": 0.01, "x": 1, "": 1}


def binary_unit(n_bytes: float) -> tuple[str, int]:
    """The largest binary unit in which ``n_bytes`` is at least 1 (B for 0), for an axis or a figure.

    >>> binary_unit(7_613_128)
    ('MiB', 1048576)
    >>> binary_unit(73_917_997_060)
    ('GiB', 1073741824)
    """
    for name, factor in BINARY_UNITS:
        if abs(n_bytes) >= factor:
            return name, factor
    return "B", 1


def exact(n_bytes: int) -> str:
    """``73,917,997,060 B``."""
    return f"{int(n_bytes):,} B"


def in_unit(value: float, unit: str, digits: int = 2) -> str:
    """``value`` (bytes, or a fraction for ``%``) written in ``unit``.

    >>> in_unit(73_917_997_060, "GiB")
    '68.84 GiB'
    >>> in_unit(73_917_997_060, "GB")
    '73.92 GB'
    >>> in_unit(0.374, "%", 1)
    '37.4%'
    >>> in_unit(1.3333, "x")
    'x1.33'
    >>> in_unit(5, "B")
    '5 B'
    """
    if unit == "%":
        return f"{value * 100:.{digits}f}%"
    if unit == "x":
        return f"x{value:.{digits}f}"
    if unit == "B":
        return f"{int(value):,} B"
    return f"{value / UNIT_FACTORS[unit]:,.{digits}f} {unit}"


def human(n_bytes: float, digits: int = 2) -> str:
    """Bytes in the unit that suits their size: ``7.26 MiB``, ``68.84 GiB``."""
    return in_unit(n_bytes, binary_unit(n_bytes)[0], digits)


JsonPath = Sequence[str | int]


def figure(value: float | int | None, path: JsonPath, unit: str = "B", digits: int = 2,
           text: str | None = None) -> Html:
    """A figure from the JSON at ``path`` (keys and list indices), written in ``unit``:
    ``<span class="fig" data-json='["peak_bytes"]' data-unit="GiB">68.84 GiB</span>``. ``None`` is a dash.

    Units: ``B`` (exact bytes with thousands separators), ``GiB``/``MiB``/``KiB``/``GB`` (bytes divided by
    the unit), ``%`` (a fraction times 100), ``x`` (a ratio), ``""`` (a plain number: counts, tokens, R^2).
    """
    if value is None:
        return el("span", "-", class_="fig none")
    if text is None:
        if unit == "":
            text = f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}"
        else:
            text = in_unit(value, unit, digits)
    return el("span", text, class_="fig", data_json=json.dumps(list(path)), data_unit=unit)
