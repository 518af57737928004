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

from beat_engine.schedules import ScheduleKind, ScheduleSpec, last_fires

MINUTE = timedelta(minutes=1)
_MICROSECOND = timedelta(microseconds=1)
_MINUTE_US = 60_000_000
# No limit on how many firings last_fires returns: the horizon bounds them.
_ALL = 1 << 62
OTHER_TENANTS = "other"

# An interval at least this long fires at most once per bucket: list its firings one by one.
# Shorter ones are counted per bucket (arithmetic), so a 1-second interval costs one count per
# minute, not 86,400 iterations.
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
    """Firings of one job in each bucket (sparse: bucket index -> firings).

    Instants are integer microseconds from ``start``: this runs once per distinct schedule,
    possibly tens of thousands of times for one page.
    """
    histogram: dict[int, float] = defaultdict(float)
    end_us = (end - start) // _MICROSECOND
    jitter_us = max(0, jitter // _MICROSECOND)
    now_us = (now - start) // _MICROSECOND
    if spec.kind == ScheduleKind.INTERVAL and spec.interval is not None and spec.anchor:
        interval_us = spec.interval // _MICROSECOND
        anchor_us = (spec.anchor - start) // _MICROSECOND
        if spec.interval < _LIST_FIRES_FROM:
            _count_short_interval(histogram, anchor_us, interval_us, now_us, end_us, jitter_us)
        else:
            # The first firing strictly after now, then every interval: anchor + k * interval.
            k = 0 if now_us < anchor_us else (now_us - anchor_us) // interval_us + 1
            for offset in range(anchor_us + k * interval_us, end_us, interval_us):
                _spread(histogram, offset, jitter_us, end_us, 1.0)
        return dict(histogram)
    # Cron (in the job's zone) and one-off: every firing in (now, end), from the engine's own
    # evaluator, which walks the matching days and bisects each day's times.
    for fire in last_fires(spec, now, end - _MICROSECOND, _ALL):
        _spread(histogram, (fire - start) // _MICROSECOND, jitter_us, end_us, 1.0)
    return dict(histogram)


def _count_short_interval(
    histogram: dict[int, float],
    anchor_us: int,
    interval_us: int,
    now_us: int,
    end_us: int,
    jitter_us: int,
) -> None:
    """Several firings a minute: count each bucket's firings, then spread them as one weight."""

    def before(t: int) -> int:
        # Firings anchor + k * interval (k >= 0) strictly before t.
        return 0 if t <= anchor_us else -((anchor_us - t) // interval_us)

    for index in range(end_us // _MINUTE_US):
        low = max(index * _MINUTE_US, now_us + 1)
        high = (index + 1) * _MINUTE_US
        fires = before(high) - before(low) if high > low else 0
        if fires:
            _spread(histogram, index * _MINUTE_US, jitter_us, end_us, float(fires))


def _spread(
    histogram: dict[int, float], offset: int, jitter_us: int, end_us: int, weight: float
) -> None:
    """Add ``weight`` firings dispatched uniformly over [offset, offset + jitter); none past
    ``end_us``."""
    if jitter_us <= 0:
        if 0 <= offset < end_us:
            histogram[offset // _MINUTE_US] += weight
        return
    low, high = max(offset, 0), min(offset + jitter_us, end_us)
    if high <= low:
        return
    first, last = low // _MINUTE_US, (high - 1) // _MINUTE_US
    if first == last:
        histogram[first] += weight * (high - low) / jitter_us
        return
    histogram[first] += weight * ((first + 1) * _MINUTE_US - low) / jitter_us
    middle = weight * _MINUTE_US / jitter_us
    for index in range(first + 1, last):
        histogram[index] += middle
    histogram[last] += weight * (high - last * _MINUTE_US) / jitter_us
