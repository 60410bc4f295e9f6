"""Chart geometry: scales, ticks, stacks, step areas, waterfalls, downsampling, with coordinates worked by
hand for tiny inputs (each docstring shows the arithmetic)."""

from __future__ import annotations

import pytest

from memfit.report.html.axis import ByteAxis
from memfit.report.html.geometry import (
    LinearScale,
    Segment,
    bands,
    downsample_max,
    moment_segments,
    nice_max,
    nice_step,
    nice_ticks,
    stack,
    step_area_polygons,
    timeline_segments,
    waterfall,
)
from memfit.report.html.histogram import cdf_points
from memfit.report.html.sweep import LineFit, fit_line
from memfit.report.html.timeline import moments_series, peak_zoom, phase_runs, timeline_series


def test_linear_scale_maps_ends_and_midpoints() -> None:
    """x: [0, 10] -> [100, 200]: 2.5 is a quarter of the way, 125. y (SVG, 0 at the bottom): [0, 8] -> [80, 0]:
    2 is 80 - 2 * 10 = 60."""
    x = LinearScale(0, 10, 100, 200)
    assert (x(0), x(2.5), x(10)) == (100, 125, 200)
    y = LinearScale(0, 8, 80, 0)
    assert (y(0), y(2), y(8)) == (80, 60, 0)
    assert LinearScale(5, 5, 7, 9)(5) == 7  # an empty domain maps to the start, no division by zero


@pytest.mark.parametrize(("span", "target", "step"), [
    (73.9, 5, 20),   # 14.78 -> 20
    (80, 5, 20),     # 16 -> 20
    (100, 5, 20),    # exactly 20
    (1.0, 4, 0.5),   # 0.25 -> 0.5
    (7, 7, 1),       # 1 -> 1
    (0.03, 3, 0.01),  # 0.01 -> 0.01
    (1200, 6, 200),  # 200 -> 200
])
def test_nice_step_is_the_smallest_1_2_5_step_within_target(span: float, target: int, step: float) -> None:
    assert nice_step(span, target) == pytest.approx(step)


def test_nice_ticks_and_max() -> None:
    """68.84 GiB of peak: step 20 -> axis 0..80 with ticks 0, 20, 40, 60, 80. Ticks of [68, 572] by 4:
    504 / 4 = 126 -> step 200 -> 200, 400. Tenths keep their decimals clean (0.3, not 0.30000000000000004)."""
    assert nice_max(68.84) == 80
    assert nice_ticks(0, 80) == [0, 20, 40, 60, 80]
    assert nice_ticks(68, 572, 4) == [200, 400]
    assert nice_ticks(0, 0.5, 5) == [0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert nice_max(0) == 1 and nice_max(-3) == 1


def test_byte_axis_picks_a_binary_unit() -> None:
    """7,613,128 B = 7.26 MiB -> MiB; step 2 (7.26 / 5 = 1.45 -> 2) -> top 8 MiB = 8,388,608 B."""
    a = ByteAxis.fit(7_613_128)
    assert (a.unit, a.top) == ("MiB", 8 * 2**20)
    assert [a.label(t) for t in a.ticks] == ["0 MiB", "2 MiB", "4 MiB", "6 MiB", "8 MiB"]


def test_stack_is_cumulative_in_category_order() -> None:
    assert stack({"activations": 4, "weights": 2}, ["weights", "gradients", "activations"]) == {
        "weights": (0, 2), "gradients": (2, 2), "activations": (2, 6)}


def test_step_area_polygons_for_two_moments() -> None:
    """Moments {weights 2, activations 4} then {weights 2, activations 1}, x [0, 2] -> [0, 100] (50 px per
    moment), y [0, 8] -> [80, 0] (10 px per byte).

    weights: top at 2 -> y 60 over x 0..100, bottom at 0 -> y 80.
    activations: bottom at 2 -> y 60; top at 6 -> y 20 over x 0..50, at 3 -> y 50 over x 50..100.
    gradients: zero everywhere -> no polygon."""
    segs = moment_segments([{"weights": 2, "activations": 4}, {"weights": 2, "activations": 1}])
    polys = step_area_polygons(segs, ["weights", "gradients", "activations"], LinearScale(0, 2, 0, 100),
                               LinearScale(0, 8, 80, 0))
    assert set(polys) == {"weights", "activations"}
    assert polys["weights"] == [(0, 60), (50, 60), (50, 60), (100, 60), (100, 80), (50, 80), (50, 80), (0, 80)]
    assert polys["activations"] == [(0, 20), (50, 20), (50, 50), (100, 50), (100, 60), (50, 60), (50, 60), (0, 60)]


def test_segments_of_moments_and_of_a_timeline() -> None:
    """Moments are unit-wide; timeline events hold until the next one, the last for the mean gap
    ((3 - 0) / 2 = 1.5 -> 3..4.5)."""
    assert [(s.x0, s.x1) for s in moment_segments([{}, {}, {}])] == [(0, 1), (1, 2), (2, 3)]
    assert [(s.x0, s.x1) for s in timeline_segments([0, 2, 3], [{}, {}, {}])] == [(0, 2), (2, 3), (3, 4.5)]
    assert [(s.x0, s.x1) for s in timeline_segments([7], [{}])] == [(7, 8)]
    assert Segment(0, 1, {"a": 2, "b": 3}).total == 5


def test_downsample_keeps_each_buckets_highest_point_and_the_peak() -> None:
    """8 points into 3 buckets: i * 8 // 3 -> [0:2] [2:5] [5:8]; highest of each: 5 (i 1), 9 (i 4), 4 (i 7)."""
    assert downsample_max([1, 5, 2, 2, 9, 1, 3, 4], 3) == [1, 4, 7]
    assert downsample_max([3, 1], 5) == [0, 1]
    series = [(i * 37) % 101 for i in range(5000)]
    keep = downsample_max(series, 600)
    assert len(keep) == 600 and keep == sorted(keep)
    assert max(series) in [series[i] for i in keep]


def test_waterfall_bars_float_between_levels() -> None:
    """Start 70; -40 -> 30 (bar 30..70); -10 -> 20 (bar 20..30); +5 -> 25 (bar 20..25)."""
    assert waterfall(70, [-40, -10, 5]) == [(0, 70), (30, 70), (20, 30), (20, 25)]


def test_bands_share_pixels_after_gaps() -> None:
    """100 px, three bands 1:1:2 with 10 px gaps: 80 px to share -> 20, 20, 40 at 0, 30, 60."""
    assert bands([1, 1, 2], 100, gap=10) == [(0, 20), (30, 20), (60, 40)]


def test_fit_line_and_cdf_points() -> None:
    """y = 2x + 6 from 0 to 8: (0, 6) and (8, 22). CDF of counts 1, 2, 1 over edges 0, 5, 10, 15: 1/4 below
    5, 3/4 below 10, all below 15."""
    assert fit_line(LineFit(2.0, 6.0, 1.0), 0, 8) == ((0, 6.0), (8, 22.0))
    assert cdf_points([0, 5, 10, 15], [1, 2, 1]) == [(0, 0.0), (5, 0.25), (10, 0.75), (15, 1.0)]


def test_moments_in_both_forms_and_a_timeline() -> None:
    """Today's {label: bytes} (one "total" series), the typed list (categories) and a timeline give the same
    segments and peak for the same numbers."""
    plain = moments_series({"forward: loss": 10, "backward: loss": 12, "optimizer: step": 4})
    typed = moments_series([
        {"phase": "forward", "label": "forward: loss", "parts": {"weights_frozen": 4, "activations": 6}},
        {"phase": "backward", "label": "backward: loss", "parts": {"weights_frozen": 4, "logits": 8}},
        {"phase": "optimizer", "label": "optimizer: step", "parts": {"weights_frozen": 4}},
    ])
    line = timeline_series([
        {"t": 0, "phase": "forward", "module": "model", "bytes_by_category": {"weights_frozen": 4, "activations": 6}},
        {"t": 1, "phase": "backward", "module": "lm_head", "bytes_by_category": {"weights_frozen": 4, "logits": 8}},
        {"t": 2, "phase": "optimizer", "module": "", "bytes_by_category": {"weights_frozen": 4}},
    ])
    for s in (plain, typed, line):
        assert [g.total for g in s.segments] == [10, 12, 4]
        assert s.peak_index == 1
        assert s.phases == ("forward", "backward", "optimizer")
    assert plain.categories == ["total"]
    assert typed.categories == ["weights_frozen", "activations", "logits"]
    assert typed.paths[1] == ("moments", 1, "parts") and plain.paths[1] == ("moments", "backward: loss")
    assert line.paths[2] == ("timeline", 2, "bytes_by_category")


def test_phase_runs() -> None:
    assert phase_runs(["forward", "forward", "backward", "backward", "optimizer"]) == [
        ("forward", 0, 2), ("backward", 2, 4), ("optimizer", 4, 5)]


def test_a_long_timeline_keeps_its_ends_and_its_peak() -> None:
    """5,000 events with the peak at event 1,234: 600 points drawn, the first (t = 0) and the last (t = 4,999)
    among them so the chart spans the whole step, and the peak."""
    events = [{"t": i, "phase": "forward", "module": "m",
               "bytes_by_category": {"activations": 10_000 if i == 1234 else i % 97}} for i in range(5000)]
    s = timeline_series(events)
    assert len(s.segments) == 600 and s.dropped == 4400
    assert s.segments[0].x0 == 0 and s.segments[-1].x0 == 4999
    assert s.segments[s.peak_index].total == 10_000 and s.paths[s.peak_index] == ("timeline", 1234, "bytes_by_category")


def test_each_bucket_is_drawn_at_its_highest_point_across_the_bucket_and_the_peak_has_a_close_up() -> None:
    """5,000 events, one 10 kB burst at event 1,234 over a floor below 97 B: drawn with 600 points, the burst
    spans its whole bucket (events 1 + 4,998 x b // 598 onwards, 8 or 9 of them), not the one event it was
    recorded at, so it stays visible; the close-up draws the 81 recorded points around it, paths unchanged."""
    events = [{"t": i, "phase": "forward", "module": "m",
               "bytes_by_category": {"activations": 10_000 if i == 1234 else i % 97}} for i in range(5000)]
    s = timeline_series(events)
    peak = s.segments[s.peak_index]
    b = (1234 - 1) * 598 // 4998  # the bucket holding event 1,234
    assert peak.x0 == 1 + b * 4998 // 598 <= 1234 and peak.x1 == 1 + (b + 1) * 4998 // 598 > 1234
    zoom = peak_zoom(events)
    assert zoom is not None and len(zoom.segments) == 81 and zoom.segments[0].x0 == 1234 - 40
    assert zoom.paths[zoom.peak_index] == ("timeline", 1234, "bytes_by_category")
    assert peak_zoom(events[:100]) is None  # short enough to read whole
