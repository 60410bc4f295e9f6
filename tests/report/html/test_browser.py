"""Each command's report in a real browser (headless Chromium), loaded from disk: no console errors, no
request but the file itself, the figures in the DOM equal the JSON, no horizontal overflow in a 420 px
window or in print, and a PDF prints. The 1200 x 1600 screenshots go to bench/screenshots/ for the README."""

from __future__ import annotations

import re
from pathlib import Path

import dom_figures
import pytest
from cdp import Chromium, file_url
from report_fixtures import COMMANDS, load, required_paths

from memfit.report.html import render_page

SCREENSHOTS = Path(__file__).resolve().parents[3] / "bench" / "screenshots"


@pytest.mark.parametrize("command", COMMANDS)
def test_report_in_chromium(chromium: Chromium, command: str, tmp_path: Path) -> None:
    d = load(command)
    page = tmp_path / f"{command}.html"
    page.write_text(render_page(d, source=f"{command}.json"), encoding="utf-8")
    url = file_url(page)

    wide = chromium.visit(url, width=1200, height=1600, screenshot=True, full_page=False)
    assert wide.errors == []
    assert wide.requests == [url]  # nothing fetched: no CDN, no font, no image
    missing = required_paths(command, d) - set(dom_figures.check(wide.dom, d))
    assert not missing, f"figures missing from the {command} DOM: {sorted(missing)}"
    if d.get("timeline"):  # an engine's recorded timeline: the whole step, then every point around its peak
        assert "t (allocation events)" in wide.dom and "Close-up of events" in wide.dom
    assert wide.scroll_width <= wide.client_width
    assert wide.png[:8] == b"\x89PNG\r\n\x1a\n"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{command}.png"
    if not shot.exists() or shot.read_bytes() != wide.png:
        shot.write_bytes(wide.png)

    narrow = chromium.visit(url, width=420, height=900, screenshot=True)
    (tmp_path / f"{command}-420.png").write_bytes(narrow.png)
    assert narrow.errors == []
    assert narrow.client_width == 420
    assert narrow.scroll_width <= narrow.client_width, f"{command}: {narrow.scroll_width} px wide in a 420 px window"

    printed = chromium.visit(url, width=700, media="print")
    assert printed.scroll_width <= printed.client_width


def test_report_prints_to_pdf(chromium: Chromium, tmp_path: Path) -> None:
    page = tmp_path / "estimate.html"
    page.write_text(render_page(load("estimate")), encoding="utf-8")
    pdf = chromium.print_pdf(file_url(page))
    assert pdf[:5] == b"%PDF-" and len(pdf) > 20_000
    pages = len(re.findall(rb"/Type\s*/Page(?!s)", pdf))
    assert 1 <= pages <= 5, f"the estimate report prints on {pages} A4 pages"
