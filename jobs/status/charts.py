"""The status pages' charts: their figures turned into svg_charts calls, returned safe to embed.

svg_charts escapes every text it draws, so its output is marked safe here, in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from django.utils.safestring import SafeString, mark_safe

from jobs.status import svg_charts as svg
from jobs.status.overview_data import MinuteFigures, Window

UNAVAILABLE = "Unavailable: the query failed or took too long"


def ts(instant: datetime) -> float:
    return instant.timestamp()


def hhmm(value: float) -> str:
    return datetime.fromtimestamp(value, tz=UTC).strftime("%H:%M")


def day_hhmm(value: float) -> str:
    return datetime.fromtimestamp(value, tz=UTC).strftime("%m-%d %H:%M")


def seconds(value: float) -> str:
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.1f} s"
    return f"{value * 1000:.0f} ms"


def per_second(value: float) -> str:
    return f"{value:.3g}/s"


def _safe(markup: str) -> SafeString:
    # Safe: svg_charts escapes every text it draws.
    return mark_safe(markup)


def _window_range(window: Window) -> tuple[float, float]:
    return ts(window.start), ts(window.start) + 3600


def firings_chart(window: Window, figures: Mapping[datetime, MinuteFigures] | None) -> SafeString:
    title = "Firings per second (by minute due, UTC)"
    axes = svg.Axes(x_format=hhmm, y_format=per_second)
    if figures is None:
        return _safe(svg.line_chart([], title=title, axes=axes, empty=UNAVAILABLE))
    if not figures:
        return _safe(
            svg.line_chart([], title=title, axes=axes, empty="No firings in the last hour")
        )
    points: list[tuple[float, float | None]] = [
        (ts(m), (figures[m].firings if m in figures else 0) / window.seconds_in(m))
        for m in window.minutes
    ]
    series = [svg.Series("firings/s", points, "s0")]
    return _safe(svg.line_chart(series, title=title, axes=axes, x_range=_window_range(window)))


def lag_chart(
    window: Window, figures: Mapping[datetime, MinuteFigures] | None, *, kind: str
) -> SafeString:
    """p50/p99 per minute of ``kind``: "publish" (due to in the broker) or "start" (to started)."""
    title = {
        "publish": "Publish lag p50 / p99 (due to in the broker)",
        "start": "Start lag p50 / p99 (due to started by a worker)",
    }[kind]
    axes = svg.Axes(x_format=hhmm, y_format=seconds)
    if figures is None:
        return _safe(svg.line_chart([], title=title, axes=axes, empty=UNAVAILABLE))
    p50: list[tuple[float, float | None]] = []
    p99: list[tuple[float, float | None]] = []
    for m in window.minutes:
        row = figures.get(m)
        p50.append((ts(m), getattr(row, f"{kind}_p50") if row else None))
        p99.append((ts(m), getattr(row, f"{kind}_p99") if row else None))
    series = [svg.Series("p50", p50, "s0"), svg.Series("p99", p99, "s1")]
    return _safe(svg.line_chart(series, title=title, axes=axes, x_range=_window_range(window)))


def retries_chart(
    window: Window,
    retries: Mapping[datetime, int] | None,
    dead: Mapping[datetime, int] | None,
) -> SafeString:
    title = "Retries and dead letters per minute"
    axes = svg.Axes(x_format=hhmm)
    if retries is None or dead is None:
        return _safe(
            svg.stacked_bar_chart([], title=title, axes=axes, bucket=60, empty=UNAVAILABLE)
        )
    layers = [
        svg.Series("retries", [(ts(m), float(retries.get(m, 0))) for m in window.minutes], "s1"),
        svg.Series("dead letters", [(ts(m), float(dead.get(m, 0))) for m in window.minutes], "s3"),
    ]
    empty = "No retries or dead letters in the last hour"
    return _safe(
        svg.stacked_bar_chart(
            layers, title=title, axes=axes, bucket=60, x_range=_window_range(window), empty=empty
        )
    )


def run_timeline(marks: Sequence[svg.Mark], *, title: str) -> SafeString:
    axes = svg.Axes(x_format=day_hhmm)
    return _safe(svg.timeline_chart(marks, title=title, axes=axes))


def job_lateness_chart(
    publish: Sequence[tuple[datetime, float]], start: Sequence[tuple[datetime, float]]
) -> SafeString:
    """Publish lag and start lag of a job's recent runs, by due instant."""
    axes = svg.Axes(x_format=day_hhmm, y_format=seconds)
    series = [
        svg.Series("publish lag", [(ts(at), value) for at, value in publish], "s0"),
        svg.Series("start lag", [(ts(at), value) for at, value in start], "s1"),
    ]
    title = "Lag of recent runs (publish: due to in the broker; start: due to started)"
    return _safe(svg.line_chart(series, title=title, axes=axes, empty="No published runs yet"))
