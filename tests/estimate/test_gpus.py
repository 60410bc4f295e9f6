"""The GPU table: every row's bytes recomputed from the figure it cites, and sizes typed without a unit.

The recomputation below is this test's own (a regex and a unit table written here), not
``memfit.estimate.gpus.figure_bytes`` or ``memfit.units.parse_size``.
"""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import gpu_table, resolve_gpu
from memfit.units import parse_size

UNITS = {"B": 1, "MiB": 1024 * 1024, "GiB": 1024 * 1024 * 1024}
FIGURE = re.compile(r"^(\d{1,3}(?:,\d{3})*) (B|MiB|GiB)$")  # "15,360 MiB", "205,822,885,888 B"
DATASHEET = re.compile(r"^(\d+) GB$")  # vendors print decimal-looking "GB"


def _rows() -> list[dict[str, object]]:
    text = resources.files("memfit.estimate").joinpath("gpus.json").read_text(encoding="utf-8")
    return json.loads(text)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: str(r["name"]))
def test_every_row_derives_its_bytes_from_the_figure_it_cites(row: dict[str, object]) -> None:
    memory, datasheet, source = str(row["memory"]), str(row["datasheet"]), str(row["source"])
    m = FIGURE.match(memory)
    assert m, f"{row['name']}: the cited figure {memory!r} must be digits with its unit (B, MiB, GiB)"
    expected = int(m.group(1).replace(",", "")) * UNITS[m.group(2)]
    assert resolve_gpu(str(row["name"])).bytes == expected
    # the source sentence quotes both figures exactly as the row carries them, each with its unit
    assert memory in source and datasheet in source, source
    assert DATASHEET.match(datasheet), f"{row['name']}: datasheet figure {datasheet!r} must say GB"
    assert "taken as" not in source  # no unit is silently swapped (issue 21.16: "180 GB taken as 180 GiB")
    # the device reports a little less than the datasheet's figure read as GiB, never more, never far less:
    # a figure read in the wrong unit (GB as GiB, MiB as MB) or a typo falls outside this band
    sold = int(DATASHEET.match(datasheet).group(1)) * UNITS["GiB"]  # type: ignore[union-attr]
    assert 0.90 * sold <= expected <= sold, (row["name"], expected / UNITS["GiB"])


def test_the_rows_issue_21_named() -> None:
    """B200: 183,359 MiB (not "180 GB taken as 180 GiB"); A10: bytes equal the 23,028 MiB it cites; T4: 15,360 MiB
    = 15.00 GiB while sold as 16 GB."""
    assert resolve_gpu("B200").bytes == 183_359 * 1024**2 == 192_265_846_784
    assert resolve_gpu("A10").bytes == 23_028 * 1024**2 == 24_146_608_128
    t4 = resolve_gpu("T4")
    assert t4.bytes == 15 * 1024**3 and t4.datasheet == "16 GB" and t4.memory == "15,360 MiB"
    assert len(gpu_table()) == len(_rows())


def test_demo_names_the_small_card_in_the_tables_figures() -> None:
    """The demo's second part quotes the T4 row of the table (sold as 16 GB, 15.00 GiB reported), not a
    "16 GiB card"."""
    from memfit.cli.demo import SMALL_CARD, small_card_heading

    g = resolve_gpu(SMALL_CARD)
    heading = small_card_heading()
    assert g.name in heading and str(g.datasheet) in heading and str(g.memory) in heading
    assert f"{g.bytes / 1024**3:.2f} GiB" in heading and "15.00 GiB" in heading
    assert "16 GiB" not in heading


def test_a_size_without_a_unit_is_refused() -> None:
    with pytest.raises(MemfitError, match="no unit"):
        parse_size("24")
    with pytest.raises(MemfitError, match="24GiB .* 24GB"):
        resolve_gpu("24")
    assert parse_size("1024B") == 1024 and resolve_gpu("24GiB").bytes == 24 * 1024**3
    assert resolve_gpu("3090").name == "RTX 3090"  # a bare number that is a table alias is a name


def test_cli_gpu_without_a_unit_is_an_error_not_24_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21.3: ``--gpu 24`` was read as 24 bytes ("does not fit ... on 24 (0.00 GiB)", exit 0)."""
    assert main(["estimate", "llama-3.2-1b", "--gpu", "24"]) == 1
    captured = capsys.readouterr()
    assert "no unit" in captured.err and "24GiB" in captured.err and "0.00 GiB" not in captured.out
    assert main(["measure", "llama-3.2-1b", "--memory-limit", "2147483648", "--device", "cpu"]) == 1
    assert "no unit" in capsys.readouterr().err
