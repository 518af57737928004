"""svg_charts: values land on the right pixels, texts are escaped, output is deterministic."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from jobs.status import svg_charts as svg

SVG = "{http://www.w3.org/2000/svg}"
FRAME = svg.Frame(width=460, height=240, left=60, right=0, top=20, bottom=20)
# Plot area: x 60..460 (400 px), y 20..220 (200 px).
AXES = svg.Axes(x_format=lambda v: f"t{v:g}")


def _parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)  # also proves the markup is well-formed XML


def _points(root: ET.Element) -> list[tuple[float, float, str]]:
    return [
        (float(c.get("cx", "")), float(c.get("cy", "")), c.findtext(f"{SVG}title") or "")
        for c in root.iter(f"{SVG}circle")
        if "point" in (c.get("class") or "")
    ]


def test_scale_maps_the_domain_onto_the_pixel_range() -> None:
    scale = svg.Scale(0, 100, 60, 460)
    assert scale(0) == 60
    assert scale(25) == 160
    assert scale(100) == 460
    flipped = svg.Scale(0, 10, 220, 20)
    assert flipped(0) == 220
    assert flipped(10) == 20
    assert flipped(2.5) == 170


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (0.7, 1), (1, 1), (1.2, 2), (2.2, 2.5), (3, 5), (7, 10), (42, 50), (0.013, 0.02)],
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert svg.nice_ceiling(value) == pytest.approx(ceiling)


def test_time_ticks_fall_on_round_instants() -> None:
    # An hour starting at 00:00:30 gets ticks on whole 10-minute marks.
    assert svg.time_ticks(30, 3630) == [600, 1200, 1800, 2400, 3000, 3600]
    assert svg.time_ticks(0, 60) == [0, 10, 20, 30, 40, 50, 60]


def test_line_chart_points_land_on_their_coordinates() -> None:
    series = [svg.Series("a", [(0, 0), (50, 5), (100, 10)]), svg.Series("b", [(100, 2.5)], "s1")]
    root = _parse(svg.line_chart(series, title="T", axes=AXES, x_range=(0, 100), frame=FRAME))
    assert root.get("data-points") == "4"
    # y axis 0..10 (nice ceiling of the maximum) over 200 px, x 0..100 over 400 px.
    assert _points(root) == [
        (60.0, 220.0, "a at t0: 0"),
        (260.0, 120.0, "a at t50: 5"),
        (460.0, 20.0, "a at t100: 10"),
        (460.0, 170.0, "b at t100: 2.5"),
    ]
    paths = [p.get("d") for p in root.iter(f"{SVG}path")]
    assert paths == ["M60.0,220.0 L260.0,120.0 L460.0,20.0", "M460.0,170.0"]


def test_a_missing_value_breaks_the_line() -> None:
    series = [svg.Series("a", [(0, 1), (1, None), (2, 1), (3, 1)])]
    root = _parse(svg.line_chart(series, title="T", axes=AXES, x_range=(0, 3), frame=FRAME))
    (path,) = [p.get("d") or "" for p in root.iter(f"{SVG}path")]
    assert path.count("M") == 2
    assert root.get("data-points") == "3"


def test_y_ticks_are_labelled_from_zero_to_the_ceiling() -> None:
    series = [svg.Series("a", [(0, 3.0), (1, 4.0)])]
    root = _parse(svg.line_chart(series, title="T", axes=AXES, frame=FRAME))
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"]
    assert labels == ["0", "1", "2", "3", "4", "5"]


@pytest.mark.parametrize(
    ("ceiling", "ticks"),
    [(1, [0, 0.2, 0.4, 0.6, 0.8, 1]), (2, [0, 0.5, 1, 1.5, 2]), (25, [0, 5, 10, 15, 20, 25]),
     (50, [0, 10, 20, 30, 40, 50]), (0.02, [0, 0.005, 0.01, 0.015, 0.02])],
)  # fmt: skip
def test_value_ticks_are_round_steps(ceiling: float, ticks: list[float]) -> None:
    assert svg.value_ticks(ceiling) == pytest.approx(ticks)


def test_stacked_bars_sit_on_each_other() -> None:
    layers = [
        svg.Series("retries", [(0, 2), (60, 0)], "s1"),
        svg.Series("dead", [(0, 2), (60, 1)], "s3"),
    ]
    markup = svg.stacked_bar_chart(
        layers, title="T", axes=AXES, bucket=60, x_range=(0, 120), frame=FRAME
    )
    root = _parse(markup)
    bars = [
        (r.get("class"), float(r.get("x", "")), float(r.get("y", "")), float(r.get("height", "")))
        for r in root.iter(f"{SVG}rect")
        if "bar" in (r.get("class") or "").split()
    ]
    # Totals 4 and 1: y axis 0..5, 40 px per unit; the zero-height layer is not drawn.
    assert bars == [
        ("bar s1", 60.0, 140.0, 80.0),
        ("bar s3", 60.0, 60.0, 80.0),
        ("bar s3", 260.0, 180.0, 40.0),
    ]
    assert root.get("data-points") == "3"


def test_timeline_draws_a_dot_per_run_and_a_tick_per_extra_attempt() -> None:
    marks = [
        svg.Mark(x=0, state="succeeded", attempts=1, label="first", href="/status/runs/1/"),
        svg.Mark(x=100, state="dead", attempts=3, label="second", href="/status/runs/2/"),
    ]
    root = _parse(svg.timeline_chart(marks, title="T", axes=AXES, frame=FRAME))
    circles = [(c.get("class"), c.get("cx")) for c in root.iter(f"{SVG}circle")]
    assert circles == [
        ("run state-succeeded", "60.0"),
        ("run state-dead", "460.0"),
        ("attempt state-dead", "460.0"),
        ("attempt state-dead", "460.0"),
    ]
    # The extra attempts stack upwards from the run's dot.
    heights = [float(c.get("cy", "")) for c in root.iter(f"{SVG}circle")]
    assert heights[1] > heights[2] > heights[3]
    links = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert links == ["/status/runs/1/", "/status/runs/2/"]


def test_a_run_with_many_attempts_draws_a_bounded_stack() -> None:
    marks = [svg.Mark(x=0, state="dead", attempts=50, label="50 attempts")]
    root = _parse(svg.timeline_chart(marks, title="T", axes=AXES, frame=FRAME))
    extra = [c for c in root.iter(f"{SVG}circle") if "attempt" in (c.get("class") or "")]
    assert len(extra) == svg.MAX_EXTRA_ATTEMPTS
    assert all(float(c.get("cy", "")) > FRAME.top for c in extra)


@pytest.mark.parametrize(
    "render",
    [
        lambda: svg.line_chart([], title="T", axes=AXES),
        lambda: svg.line_chart([svg.Series("a", [(0, None)])], title="T", axes=AXES),
        lambda: svg.stacked_bar_chart([svg.Series("a", [(0, 0)])], title="T", axes=AXES, bucket=1),
        lambda: svg.timeline_chart([], title="T", axes=AXES),
    ],
)
def test_no_data_is_an_explicit_empty_state(render: object) -> None:
    assert callable(render)
    root = _parse(render())
    assert root.get("data-points") == "0"
    assert any("empty" in (t.get("class") or "") for t in root.iter(f"{SVG}text"))


def test_every_text_from_data_is_escaped() -> None:
    hostile = '<script>alert("x")</script>&'
    markup = svg.line_chart(
        [svg.Series(hostile, [(0, 1)], css='s0" onload="x')],
        title=hostile,
        axes=svg.Axes(x_format=lambda v: hostile),
    )
    timeline = svg.timeline_chart(
        [svg.Mark(x=0, state='ok"x', attempts=1, label=hostile, href='/a?b=1&c="2"')],
        title=hostile, axes=AXES,
    )  # fmt: skip
    for text in (markup, timeline):
        assert "<script>" not in text
        assert 'onload="x' not in text
        assert 'ok"x' not in text
        _parse(text)


def test_output_is_deterministic() -> None:
    series = [svg.Series("a", [(float(i), float(i % 7)) for i in range(60)])]
    first = svg.line_chart(series, title="T", axes=AXES)
    assert first == svg.line_chart(series, title="T", axes=AXES)
    assert re.search(r'data-points="60"', first)
