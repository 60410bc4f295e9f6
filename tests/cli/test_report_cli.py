"""``memfit report RESULT.json --html FILE`` and ``--html FILE`` on the commands: exit codes, the page's key
figure, the same page either way, --force, and bad input as one red line."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from memfit.cli import main

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _without_source(html: str) -> str:
    return re.sub(r" Rendered from [^<]*", "", html)


ESTIMATE = ["estimate", "llama-3.1-8b", "--rank", "16", "--batch", "4", "--seq", "2048", "--gpu", "24GiB"]


def test_report_from_json_equals_the_direct_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The estimate of the README: peak 73,917,997,060 B. `--html` and `report` of its `--json` are one page."""
    rc, out, _ = _run([*ESTIMATE, "--json"], capsys)
    assert rc == 0
    result = tmp_path / "estimate.json"
    result.write_text(out)
    direct = tmp_path / "direct.html"
    rc, _, err = _run([*ESTIMATE, "--html", str(direct)], capsys)
    assert rc == 0 and f"HTML report written to {direct}" in err
    page = tmp_path / "page.html"
    rc, _, err = _run(["report", str(result), "--html", str(page)], capsys)
    assert rc == 0 and "estimate report written" in err
    html = page.read_text()
    assert '<span class="fig" data-json="[&quot;peak_bytes&quot;]" data-unit="B">73,917,997,060 B</span>' in html
    assert "Rendered from estimate.json." in html
    assert _without_source(html) == direct.read_text()


def test_fit_html_keeps_json_on_stdout_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "fit.html"
    rc, out, err = _run(["fit", "llama-3.1-8b", "--gpu", "24GiB", "--rank", "64", "--batch", "4", "--seq", "2048",
                         "--json", "--html", str(page)], capsys)
    assert rc == 0
    d = json.loads(out)  # nothing but the JSON on stdout
    assert "HTML report written" in err
    assert f"{d['steps'][-1]['peak_bytes']:,} B" in page.read_text()


def test_existing_file_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.html"
    page.write_text("keep me")
    rc, _, err = _run([*ESTIMATE, "--html", str(page)], capsys)
    assert rc == 1 and "page.html exists: pass --force to replace it" in err and "Traceback" not in err
    assert page.read_text() == "keep me"
    rc, _, _ = _run([*ESTIMATE, "--html", str(page), "--force"], capsys)
    assert rc == 0 and page.read_text().startswith("<!doctype html>")


def test_slow_commands_check_the_target_before_working(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """trace of an 8B model takes tens of seconds; an unwritable --html must fail before it starts."""
    pytest.importorskip("torch")
    page = tmp_path / "t.html"
    page.write_text("x")
    start = time.monotonic()
    rc, _, err = _run(["trace", "llama-3.1-8b", "--html", str(page)], capsys)
    assert rc == 1 and "exists: pass --force" in err
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(("content", "message"), [
    ('{"a": 1}', "is not the --json output of memfit estimate, trace, measure, fit, lengths, lab (its keys: a)"),
    ('{"a": ', "is not valid JSON (line 1, column 7"),
    ("[1]", "the JSON is a list, not an object"),
    (None, "no file at"),
])
def test_bad_result_is_one_red_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                    message: str) -> None:
    result = tmp_path / "r.json"
    if content is not None:
        result.write_text(content)
    rc, _, err = _run(["report", str(result), "--html", str(tmp_path / "r.html")], capsys)
    assert rc == 1
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # one line (rich may wrap it)
    assert not (tmp_path / "r.html").exists()


def test_rule_of_thumb_has_no_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["estimate", "--rule-of-thumb", "--layers", "2", "--hidden", "8", "--html",
                       str(tmp_path / "r.html")], capsys)
    assert rc == 1 and "drop --rule-of-thumb" in err


def test_lengths_json_carries_the_histogram_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """39 texts of 1..39 words with the Qwen3 tokenizer: the histogram counts every example once, and the page
    shows the JSON's p95."""
    pytest.importorskip("tokenizers")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": "word " * k}) + "\n" for k in range(1, 40)))
    page = tmp_path / "lengths.html"
    rc, out, _ = _run(["lengths", str(data), "-t", str(SHARED / "tokenizers/qwen3"), "--text", "text", "--seq-len",
                       "64", "--batch", "4", "--json", "--html", str(page)], capsys)
    assert rc == 0
    d = json.loads(out)
    h = d["histogram"]
    assert sum(h["counts"]) == d["count"] == 39
    assert h["edges"][0] <= d["min"] and d["max"] < h["edges"][-1]
    html = page.read_text()
    assert f'data-json="[&quot;percentiles&quot;, &quot;p95&quot;]" data-unit="">{d["percentiles"]["p95"]:,}<' in html


def test_trace_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from memfit.runtime.build import tiny_config

    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    page = tmp_path / "trace.html"
    rc, out, _ = _run(["trace", str(tmp_path / "config.json"), "--batch", "2", "--seq", "32", "--device", "cpu",
                       "--json", "--html", str(page)], capsys)
    assert rc == 0
    d = json.loads(out)
    assert f">{d['peak_bytes']:,} B<" in page.read_text()


@pytest.mark.slow
def test_measure_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One real point in a fresh process (several seconds): the page shows the measured peak."""
    pytest.importorskip("torch")
    from memfit.runtime.build import tiny_config

    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=256)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    page = tmp_path / "measure.html"
    rc, out, _ = _run(["measure", str(tmp_path / "config.json"), "--batch", "1", "--seq", "32", "--device", "cpu",
                       "--precision", "fp32", "--steps", "1", "--json", "--html", str(page)], capsys)
    assert rc == 0
    (run,) = json.loads(out)["runs"]
    assert f">{run['peak_bytes']:,} B<" in page.read_text()
