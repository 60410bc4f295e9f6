"""The HTML pages without a browser: the command is recognised from the JSON, every figure shown equals the
JSON, user text is escaped, nothing external is referenced, bad JSON is one clear error."""

from __future__ import annotations

import copy
import re
from typing import Any

import dom_figures
import pytest
from report_fixtures import COMMANDS, LEGACY, load, required_paths

from memfit.errors import MemfitError
from memfit.report.html import detect_command, render_page


@pytest.mark.parametrize("command", COMMANDS)
def test_page_figures_equal_the_json(command: str) -> None:
    d = load(command)
    assert detect_command(d) == command
    html = render_page(d, source=f"{command}.json")
    seen = set(dom_figures.check(html, d))
    missing = required_paths(command, d) - seen
    assert not missing, f"figures not on the {command} page: {sorted(missing)}"


@pytest.mark.parametrize("command", LEGACY)
def test_older_json_still_renders(command: str) -> None:
    """Saved output of an older memfit: the estimate's {label: bytes} moments, the advisor's sentences."""
    d = load(command, legacy=True)
    html = render_page(d, source=f"{command}.json")
    missing = required_paths(command, d) - set(dom_figures.check(html, d))
    assert not missing, f"figures not on the {command} page: {sorted(missing)}"
    if command == "fit":
        assert d["steps"][0]["cost"] in html and "Skipped: longest_example (needs --data and --tokenizer)" in html


def test_fit_page_writes_the_sentences_from_the_data() -> None:
    """The advisor's JSON has codes and figures; the page words them as the terminal report does."""
    d = load("fit")
    assert "cost" not in d["steps"][0] and d["skipped"][1] == {"action": "attention", "reason": "already",
                                                              "facts": {"value": "sdpa"}}
    html = render_page(d)
    assert "time only: x1.33 step time (model: one extra forward, fwd:bwd = 1:2)" in html
    assert "attention (already sdpa)" in html and "Needs: model.gradient_checkpointing_enable()" in html
    assert "Sequence length: no data given" in html and "Why rank comes last: rank 64 -&gt; 8" in html


@pytest.mark.parametrize("command", COMMANDS)
def test_page_is_self_contained(command: str) -> None:
    """No script, no external reference: the only URL is the SVG namespace (a name, never fetched)."""
    html = render_page(load(command))
    assert html.startswith("<!doctype html>")
    assert "<script" not in html.lower()
    for attr in ("src=", "href=", "url(", "@import"):
        assert attr not in html, attr
    urls = set(re.findall(r"https?://[^\s\"'<>]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert '<meta name="viewport"' in html and "@media print" in html and "viewBox=" in html


def test_user_text_is_escaped() -> None:
    """Model names and paths come from users: markup in them must come out as text."""
    d = load("estimate")
    d["model"] = '<script>alert("x")</script>'
    d["moments"] = [{"phase": "forward", "label": 'forward: <b onmouseover="x">', "parts": {"inputs": 5},
                     "total": 5}, *d["moments"]]
    html = render_page(d, source='my "runs" & <stuff>.json')
    assert "<script>" not in html and "<b onmouseover" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "my &quot;runs&quot; &amp; &lt;stuff&gt;.json" in html
    lengths = load("lengths")
    lengths["source"] = "data/<img src=x onerror=alert(1)>.jsonl"
    assert "<img" not in render_page(lengths)


def test_estimate_page_takes_typed_moments_and_a_timeline() -> None:
    """Typed moments and an engine timeline draw one polygon per category present, the peak labelled and
    listed with its categories; older totals-only moments draw one grey series."""
    d = load("estimate")
    typed = copy.deepcopy(d)
    typed["moments"] = [
        {"phase": "forward", "label": "forward: loss", "parts": {"weights_frozen": 100, "activations": 50}},
        {"phase": "backward", "label": "backward: loss", "parts": {"weights_frozen": 100, "activations": 50,
                                                                   "logits": 30}},
        {"phase": "optimizer", "label": "optimizer: step", "parts": {"weights_frozen": 100, "optimizer": 20}},
    ]
    html = render_page(typed)
    step = html[html.index("Memory over the step"):]
    step = step[: step.index("</section>")]
    assert step.count("<polygon") == 4  # weights_frozen, optimizer, activations, logits
    assert "peak 180 B" in step and "alive at the peak (backward: loss)" in step
    checked = set(dom_figures.check(html, typed))
    assert ("moments", 1, "parts", "logits") in checked

    timeline = copy.deepcopy(d)
    timeline["timeline"] = [{"t": i, "phase": "forward" if i < 3000 else "backward", "module": f"m{i % 7}",
                             "bytes_by_category": {"weights_frozen": 1000, "activations": i if i < 3000 else
                                                   6000 - i}} for i in range(4000)]
    html = render_page(timeline)
    assert "600 of 4,000 timeline points drawn" in html
    # the highest point, i = 3000 (activations 6000 - 3000 = 3000 > 2999 at i = 2999): 1000 + 3000 = 4,000 B
    # = 3.906 KiB, kept by the downsampling and listed with its categories
    assert "peak 3.91 KiB" in html
    assert ("timeline", 3000, "bytes_by_category", "activations") in set(dom_figures.check(html, timeline))


@pytest.mark.parametrize(("data", "message"), [
    ({"a": 1}, "not the --json output of memfit estimate, trace, measure, fit, lengths, lab (its keys: a)"),
    ([1, 2], "the JSON is a list, not an object"),
    ({"mode": "rule-of-thumb", "activation_bytes": 1}, "without --rule-of-thumb"),
])
def test_unknown_json_is_one_clear_error(data: Any, message: str) -> None:
    with pytest.raises(MemfitError, match=re.escape(message)):
        render_page(data)


def test_malformed_json_of_a_known_kind_is_one_clear_error() -> None:
    d = load("estimate")
    d["components"] = 5
    with pytest.raises(MemfitError, match=r"looks like `memfit estimate --json` output but a field is missing"):
        render_page(d)
    f = load("fit")
    del f["budget_bytes"]
    with pytest.raises(MemfitError, match=r"this fit JSON has no 'budget_bytes'"):
        render_page(f, command="fit")


def test_lengths_page_without_a_histogram_draws_the_cdf_through_the_percentiles() -> None:
    d = load("lengths")
    del d["histogram"]
    html = render_page(d)
    assert "drawn through the percentiles only" in html
    assert dom_figures.check(html, d)


@pytest.mark.parametrize("command", ["trace", "measure"])
def test_trace_and_measure_pages_draw_a_timeline_when_the_json_has_one(command: str) -> None:
    """The engines' coming timeline: a stacked area, each phase's highest point (three rows, not one per
    event) and the peak's categories tied to the JSON. Hand-made: weights 100 B throughout, activations
    growing 10 B per event through the forward (events 0-9), logits 500 B at event 10, then the backward
    freeing 10 B of activations per event, and the optimizer step with 200 B of state."""
    d = load(command)
    timeline = [{"t": i, "phase": "forward", "module": f"model.layers.{i}",
                 "bytes_by_category": {"weights_frozen": 100, "activations": 10 * (i + 1)}} for i in range(10)]
    timeline.append({"t": 10, "phase": "backward", "module": "lm_head",
                     "bytes_by_category": {"weights_frozen": 100, "activations": 100, "logits": 500}})
    timeline += [{"t": 11 + i, "phase": "backward", "module": f"model.layers.{9 - i}",
                  "bytes_by_category": {"weights_frozen": 100, "activations": 90 - 10 * i}} for i in range(9)]
    timeline.append({"t": 20, "phase": "optimizer", "module": "", "bytes_by_category": {"weights_frozen": 100,
                                                                                           "optimizer": 200}})
    d["timeline"] = timeline
    html = render_page(d)
    step = html[html.index("Memory over the step"):]
    step = step[: step.index("</section>")]
    assert "peak 700 B" in step  # 100 + 100 + 500 at t = 10
    assert step.count("<polygon") == 4  # weights_frozen, optimizer, activations, logits
    assert "alive at the peak (backward: lm_head)" in step
    assert step.count("<tr") == 1 + 3 + 1 + 3 + 1  # phase table: head + 3 phases; alive: head + 3 + total
    checked = set(dom_figures.check(html, d))
    assert {("timeline", 10, "bytes_by_category", c) for c in ("weights_frozen", "activations", "logits")} <= checked


def test_measure_page_reads_json_written_before_the_runtime_split() -> None:
    """Saved ``memfit measure --json`` files name the lines ``fit`` / ``fits`` and carry a prose ``verdict``:
    the page shows the same figures and sentences from them as from today's keys."""
    d = load("measure")
    old = {k: v for k, v in d.items() if k not in ("peak_vs_batch", "peak_vs_batch_headline", "checkpointing_trade")}
    old["fit"], old["fits"] = d["peak_vs_batch_headline"], d["peak_vs_batch"]
    old["checkpointing_trade"] = [{**{k: v for k, v in t.items() if k != "advice"}, "verdict": f"verdict {i}"}
                                  for i, t in enumerate(d["checkpointing_trade"])]
    html = render_page(old)
    seen = set(dom_figures.check(html, old))
    assert {("fits", i, "r2") for i in range(len(old["fits"]))} <= seen
    assert "verdict 0" in html
    new = render_page(d)
    assert "saves 32% for 28% more time: take it<" in new  # advice "take"
    assert "saves 42% for 363% more time: take it only if the run does not fit without it" in new  # "only_to_fit"


@pytest.mark.parametrize("command", ["trace", "measure"])
def test_trace_and_measure_pages_draw_the_engines_recorded_timeline(command: str) -> None:
    """The fixtures are real outputs with the engines' timelines: the page draws memory over the step from the
    timeline (not the trace's per-phase bars), and the highest point it lists as alive at the peak is the
    run's measured or traced peak, every category tied to the JSON."""
    d = load(command)
    html = render_page(d)
    peak = d["peak_bytes"] if command == "trace" else d["runs"][d["timeline_run"]["index"]]["peak_bytes"]
    totals = [sum(p["bytes_by_category"].values()) for p in d["timeline"]]
    assert max(totals) == peak and len(totals) <= 2000
    assert "t (allocation events)" in html and "Peak of each phase" not in html
    assert {p["phase"] for p in d["timeline"]} >= {"forward", "loss", "backward", "optimizer"}
    i = totals.index(peak)
    checked = set(dom_figures.check(html, d))
    assert {("timeline", i, "bytes_by_category", c) for c in d["timeline"][i]["bytes_by_category"]} <= checked
