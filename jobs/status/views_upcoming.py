"""/status/upcoming/: firings per minute for the next 24 hours, by tenant, and what makes the peaks.

The forecast groups active jobs by schedule in one statement and evaluates each distinct
schedule once (jobs/upcoming_load.py, beat_engine/load_forecast.py), so it stays cheap with
millions of jobs; the read runs under the status pages' statement timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString, mark_safe

from beat_engine.db_clock import read_database_clock
from beat_engine.load_forecast import Contribution, LoadForecast, PeakMinute
from jobs.models import Job
from jobs.status import svg_charts as svg
from jobs.status.access import Scope, render_page, status_view
from jobs.status.charts import UNAVAILABLE, day_hhmm, ts
from jobs.upcoming_load import GroupKey, example_jobs, upcoming_load

# Four series colours in status.css (s0..s3): the three busiest tenants, then the rest.
TOP_TENANTS = 3
TOP_MINUTES = 8
HORIZON = timedelta(hours=24)
T = TypeVar("T")
# The grouping statement reads every active job: about 7-9 s for 1,000,000 on a busy 2-core host.
STATEMENT_TIMEOUT_MS = 30_000
# A minute this far above the day's average is worth spreading (shown with a hint).
HERD_FACTOR = 5.0


@dataclass(frozen=True)
class Part:
    contribution: Contribution
    examples: list[Job]

    @property
    def jitter_s(self) -> float:
        return self.contribution.group.jitter.total_seconds()


@dataclass(frozen=True)
class Peak:
    minute: PeakMinute
    parts: list[Part]
    herd: bool


def _chart(forecast: LoadForecast | None) -> SafeString:
    title = "Firings per minute, next 24 hours (UTC), by tenant"
    axes = svg.Axes(x_format=day_hhmm, y_label="firings/min")
    frame = svg.Frame(width=1200, height=260)
    if forecast is None:
        markup = svg.stacked_bar_chart([], title=title, axes=axes, bucket=60, frame=frame,
                                       empty=UNAVAILABLE)  # fmt: skip
        return mark_safe(markup)  # svg_charts escapes every text it draws
    start = ts(forecast.start)
    layers = [
        svg.Series(
            tenant,
            [(start + 60 * index, round(value, 2)) for index, value in enumerate(values)],
            f"s{position}",
        )
        for position, (tenant, values) in enumerate(forecast.series.items())
    ]
    markup = svg.stacked_bar_chart(
        layers, title=title, axes=axes, bucket=60, frame=frame,
        x_range=(start, start + 60 * forecast.minutes),
        empty="No active job fires in the next 24 hours",
    )  # fmt: skip
    return mark_safe(markup)  # svg_charts escapes every text it draws


def _peaks(forecast: LoadForecast, keys: dict[Any, GroupKey]) -> list[Peak]:
    totals = forecast.totals()
    average = sum(totals) / len(totals) if totals else 0.0
    peaks = []
    for minute in forecast.peaks:
        parts = [
            Part(contribution=part, examples=example_jobs(keys[part.group]))
            for part in minute.contributions
        ]
        herd = minute.unjittered and minute.firings >= max(HERD_FACTOR * average, 10)
        peaks.append(Peak(minute=minute, parts=parts, herd=herd))
    return peaks


def _read(scope: Scope, now: Any) -> tuple[LoadForecast, int, list[Peak]]:
    forecast, keys = upcoming_load(
        now=now, tenant=scope.tenant, horizon=HORIZON, top_tenants=TOP_TENANTS,
        top_minutes=TOP_MINUTES,
    )  # fmt: skip
    return forecast, sum(group.count for group in keys), _peaks(forecast, keys)


def _bounded(read: Callable[[], T]) -> T | None:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = %s", [STATEMENT_TIMEOUT_MS])
            return read()
    except DatabaseError:
        return None


@status_view
def upcoming(request: HttpRequest, scope: Scope) -> HttpResponse:
    now = read_database_clock()
    # Every statement (the grouping, the example jobs) under a timeout: longer than the other
    # panels', since the grouping reads every active job (docs/status.md, "Upcoming load").
    result = _bounded(lambda: _read(scope, now))
    context: dict[str, Any] = {"now": now, "available": result is not None}
    if result is None:
        context["chart"] = _chart(None)
    else:
        forecast, jobs_counted, peaks = result
        totals = forecast.totals()
        context.update(
            chart=_chart(forecast),
            forecast=forecast,
            total=sum(totals),
            average=sum(totals) / len(totals),
            jobs_counted=jobs_counted,
            peaks=peaks,
        )
    return render_page(request, scope, "status/upcoming.html", context)
