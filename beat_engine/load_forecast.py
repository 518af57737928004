"""Upcoming load: firings per minute over the coming hours, from schedules and their job counts.

The input is already grouped (one entry per distinct schedule, jitter window and tenant, with the
number of jobs sharing it), so a million jobs on a few thousand distinct schedules cost a few
thousand evaluations, not a million. Each distinct (schedule, jitter) is evaluated once with the
engine's own evaluator (beat_engine/schedules.py) and multiplied by its job count.

Jitter: each job's offset is a stable hash of its id, uniform in [0, window)
(beat_engine/jitter.py), so the firings of many jobs sharing a schedule are spread evenly over the
window; the forecast spreads each firing's count uniformly over it, exact in expectation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from beat_engine.schedules import ScheduleKind, ScheduleSpec, count_fires, iter_fires

MINUTE = timedelta(minutes=1)
_MICROSECOND = timedelta(microseconds=1)
OTHER_TENANTS = "other"

# An interval at least this long fires at most once per bucket: list its firings one by one.
# Shorter ones are counted per bucket (count_fires is arithmetic for intervals), so a 1-second
# interval costs one count per minute, not 86,400 iterations.
_LIST_FIRES_FROM = MINUTE


@dataclass(frozen=True)
class ScheduleGroup:
    """Jobs of one tenant that share a schedule and a jitter window."""

    spec: ScheduleSpec
    jitter: timedelta
    tenant: str
    count: int
    # What people see for it ("0 0 * * * Europe/Paris", "every 300s"); also the drill-down key.
    label: str


@dataclass(frozen=True)
class Contribution:
    group: ScheduleGroup
    firings: float


@dataclass(frozen=True)
class PeakMinute:
    start: datetime
    firings: float
    # The schedules that make up the minute, largest first.
    contributions: tuple[Contribution, ...]
    # True when some contributor has no jitter: spreading it would flatten the peak.
    unjittered: bool


@dataclass
class LoadForecast:
    start: datetime
    minutes: int
    # Tenant (the top ones, then OTHER_TENANTS) -> firings in each minute bucket.
    series: dict[str, list[float]] = field(default_factory=dict)
    peaks: list[PeakMinute] = field(default_factory=list)
    groups_evaluated: int = 0

    def totals(self) -> list[float]:
        if not self.series:
            return [0.0] * self.minutes
        return [sum(values) for values in zip(*self.series.values(), strict=True)]

    def bucket_start(self, index: int) -> datetime:
        return self.start + index * MINUTE


def floor_minute(instant: datetime) -> datetime:
    instant = instant.astimezone(UTC)
    return instant.replace(second=0, microsecond=0)


def forecast_load(
    groups: list[ScheduleGroup],
    *,
    now: datetime,
    horizon: timedelta = timedelta(hours=24),
    top_tenants: int = 5,
    top_minutes: int = 5,
    contributors: int = 5,
) -> LoadForecast:
    """Per-minute firings in [floor(now), floor(now) + horizon), firings strictly after ``now``."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    start = floor_minute(now)
    minutes = max(1, horizon // MINUTE)
    end = start + minutes * MINUTE
    per_group = _evaluate(groups, now=now, start=start, end=end)
    forecast = LoadForecast(
        start=start, minutes=minutes, groups_evaluated=len({id(unit) for _, unit in per_group})
    )
    forecast.series = _series(per_group, minutes, top_tenants)
    forecast.peaks = _peaks(forecast, per_group, top_minutes, contributors)
    return forecast


def _evaluate(
    groups: list[ScheduleGroup], *, now: datetime, start: datetime, end: datetime
) -> list[tuple[ScheduleGroup, dict[int, float]]]:
    """Each group with the histogram of one of its jobs; one evaluation per (schedule, jitter)."""
    units: dict[tuple[ScheduleSpec, timedelta], dict[int, float]] = {}
    per_group = []
    for group in groups:
        if group.count <= 0:
            continue
        key = (group.spec, group.jitter)
        if key not in units:
            units[key] = _unit_histogram(group.spec, group.jitter, now=now, start=start, end=end)
        per_group.append((group, units[key]))
    return per_group


def _series(
    per_group: list[tuple[ScheduleGroup, dict[int, float]]], minutes: int, top_tenants: int
) -> dict[str, list[float]]:
    by_tenant: dict[str, list[float]] = defaultdict(lambda: [0.0] * minutes)
    for group, unit in per_group:
        row = by_tenant[group.tenant]
        for index, share in unit.items():
            row[index] += share * group.count
    ranked = sorted(by_tenant, key=lambda tenant: (-sum(by_tenant[tenant]), tenant))
    series = {tenant: by_tenant[tenant] for tenant in ranked[:top_tenants]}
    if len(ranked) > top_tenants:
        series[OTHER_TENANTS] = [
            sum(column)
            for column in zip(*(by_tenant[t] for t in ranked[top_tenants:]), strict=True)
        ]
    return series


def _peaks(
    forecast: LoadForecast,
    per_group: list[tuple[ScheduleGroup, dict[int, float]]],
    top_minutes: int,
    contributors: int,
) -> list[PeakMinute]:
    totals = forecast.totals()
    busiest = sorted(
        (index for index, value in enumerate(totals) if value > 0),
        key=lambda index: (-totals[index], index),
    )[:top_minutes]
    peaks = []
    for index in busiest:
        parts = [
            Contribution(group, unit[index] * group.count)
            for group, unit in per_group
            if unit.get(index, 0.0) > 0
        ]
        parts.sort(key=lambda part: (-part.firings, part.group.label, part.group.tenant))
        peaks.append(
            PeakMinute(
                start=forecast.bucket_start(index),
                firings=totals[index],
                contributions=tuple(parts[:contributors]),
                unjittered=any(part.group.jitter <= timedelta(0) for part in parts[:contributors]),
            )
        )
    return peaks


def _unit_histogram(
    spec: ScheduleSpec, jitter: timedelta, *, now: datetime, start: datetime, end: datetime
) -> dict[int, float]:
    """Firings of one job in each bucket (sparse: bucket index -> firings)."""
    histogram: dict[int, float] = defaultdict(float)
    # Firings in (now, end): the last instant counted is one microsecond before the end.
    last = end - _MICROSECOND
    interval = spec.interval if spec.kind == ScheduleKind.INTERVAL else None
    if interval is not None and interval < _LIST_FIRES_FROM:
        for index in range(int((end - start) // MINUTE)):
            bucket = start + index * MINUTE
            low, high = max(now, bucket - _MICROSECOND), min(last, bucket + MINUTE - _MICROSECOND)
            fires = count_fires(spec, low, high) if high > low else 0
            if fires:
                # Counted at the bucket's start, then spread by the jitter.
                _spread_instant(histogram, bucket, jitter, start, end, weight=fires)
        return dict(histogram)
    for fire in iter_fires(spec, now, until=last):
        _spread_instant(histogram, fire, jitter, start, end, weight=1.0)
    return dict(histogram)


def _spread_instant(
    histogram: dict[int, float],
    fire: datetime,
    jitter: timedelta,
    start: datetime,
    end: datetime,
    *,
    weight: float,
) -> None:
    """Add ``weight`` firings dispatched uniformly over [fire, fire + jitter); none past ``end``."""
    if jitter <= timedelta(0):
        if start <= fire < end:
            histogram[int((fire - start) // MINUTE)] += weight
        return
    window = jitter / _MICROSECOND
    low, high = max(fire, start), min(fire + jitter, end)
    if high <= low:
        return
    first = int((low - start) // MINUTE)
    last = int((high - start - _MICROSECOND) // MINUTE)
    for index in range(first, last + 1):
        bucket_low = max(low, start + index * MINUTE)
        bucket_high = min(high, start + (index + 1) * MINUTE)
        histogram[index] += weight * ((bucket_high - bucket_low) / _MICROSECOND) / window
