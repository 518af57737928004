"""Schedules: one-off, cron and interval specs, and the UTC instants at which they fire."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import TypeVar
from zoneinfo import ZoneInfo, available_timezones

from beat_engine.cron import CronExpression as CronExpression
from beat_engine.cron import ScheduleError as ScheduleError
from beat_engine.cron import parse_cron as parse_cron

# Cron semantics, as implemented below (Vixie cron, evaluated in the job's IANA time zone):
#
# * Cron syntax and day matching: see beat_engine/cron.py (Vixie cron).
# * Results are aware UTC instants, strictly after the instant asked about.
# * Spring-forward gap: a job with specific hours whose wall time is skipped runs once, at the
#   transition instant (the first valid instant after the gap); several skipped wall times, and a
#   firing at the transition itself, collapse into that one firing.
# * Fall-back fold: a job with specific hours runs once, at the first occurrence (fold=0).
# * A job whose hour field is `*` or a step follows elapsed time: it fires at every repeated wall
#   time it matches (both folds) and at no skipped one (nothing shifts into the transition).
# * The search looks about five years ahead (1830 local days); beyond that there is no firing.
# * Known limit: a local day with two transitions that cancel out (none in the current tz
#   database) is treated as having a constant offset.

_HORIZON_DAYS = 1830
_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)
_T = TypeVar("_T")


class ScheduleKind(StrEnum):
    ONCE = "once"
    CRON = "cron"
    INTERVAL = "interval"


# Names available_timezones() may list that are not time zones of the tz database: "localtime"
# (a link to the host's own /etc/localtime), "Factory" (tzdata's placeholder for "not
# configured yet") and "posixrules" (a template for POSIX TZ strings). Each follows whatever the
# host is set to, so the same job would fire at different instants on different machines.
PSEUDO_ZONES = frozenset({"localtime", "Factory", "posixrules"})


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(
        name
        for name in available_timezones()
        if name not in PSEUDO_ZONES and not name.startswith(("posix/", "right/"))
    )


@lru_cache(maxsize=512)
def parse_timezone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError("timezone", "timezone is required, e.g. 'Europe/Paris' or 'UTC'")
    # Membership in the tz database's own list also rules out paths, '..' and raw offsets.
    if name != "UTC" and name not in _known_zones():
        shown = name if len(name) <= 64 else f"{name[:61]}..."
        if shown.lstrip("UTCGMutcgm")[:1] in ("+", "-") or shown[:1].isdigit():
            raise ScheduleError(
                "timezone",
                f"{shown!r} is a fixed UTC offset, not a time zone; use an IANA name such as "
                "'Europe/Paris', which also follows daylight saving time",
            )
        raise ScheduleError(
            "timezone", f"unknown time zone {shown!r}; use an IANA name such as 'Europe/Paris'"
        )
    return ZoneInfo(name)


@dataclass(frozen=True)
class ScheduleSpec:
    kind: ScheduleKind
    timezone: str = "UTC"
    cron: str | None = None
    interval: timedelta | None = None
    anchor: datetime | None = None  # interval: fires at anchor + k * interval
    run_at: datetime | None = None  # once

    @classmethod
    def once(cls, run_at: datetime, timezone: str = "UTC") -> ScheduleSpec:
        spec = cls(kind=ScheduleKind.ONCE, timezone=timezone, run_at=run_at)
        spec.validate()
        return spec

    @classmethod
    def from_cron(cls, expr: str, timezone: str = "UTC") -> ScheduleSpec:
        # Not `cron`: that name is the field holding the expression.
        spec = cls(kind=ScheduleKind.CRON, timezone=timezone, cron=expr)
        spec.validate()
        return spec

    @classmethod
    def every(cls, interval: timedelta, anchor: datetime, timezone: str = "UTC") -> ScheduleSpec:
        spec = cls(kind=ScheduleKind.INTERVAL, timezone=timezone, interval=interval, anchor=anchor)
        spec.validate()
        return spec

    def validate(self, *, now: datetime | None = None) -> None:
        """Raise ScheduleError for anything wrong; with `now`, also a cron silent for 5 years."""
        parse_timezone(self.timezone)
        if self.kind == ScheduleKind.ONCE:
            self._forbid("cron", "interval", "anchor")
            _check_aware(self.run_at, "run_at", "a one-off job needs run_at")
        elif self.kind == ScheduleKind.CRON:
            self._forbid("interval", "anchor", "run_at")
            if self.cron is None:
                raise ScheduleError("schedule", "a cron job needs a schedule such as '0 9 * * *'")
            parse_cron(self.cron)
            if now is not None and next_fire_after(self, now) is None:
                raise ScheduleError("schedule", "never fires: no matching time in the next 5 years")
        elif self.kind == ScheduleKind.INTERVAL:
            self._forbid("cron", "run_at")
            _check_interval(self.interval)
            _check_aware(self.anchor, "start_at", "an interval job needs start_at")
        else:
            raise ScheduleError("schedule", f"unknown schedule kind {self.kind!r}")

    def _forbid(self, *names: str) -> None:
        fields = {"cron": "schedule", "interval": "interval", "anchor": "start_at"}
        for name in names:
            if getattr(self, name) is not None:
                label = fields.get(name, name)
                raise ScheduleError(label, f"a {self.kind} job takes no {label}")


def _check_aware(value: datetime | None, field: str, missing: str) -> None:
    if value is None:
        raise ScheduleError(field, missing)
    if value.utcoffset() is None:
        raise ScheduleError(field, f"{field} must include a UTC offset or time zone")


def _check_interval(interval: timedelta | None) -> None:
    if interval is None:
        raise ScheduleError("interval", "an interval job needs an interval")
    if interval < _SECOND:
        raise ScheduleError("interval", f"interval must be at least 1 second, got {interval}")


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is UTC:
        return value
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


def _required(value: _T | None, field: str) -> _T:
    if value is None:
        raise ScheduleError(field, f"schedule is missing {field}")
    return value


def next_fire_after(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """The first firing strictly after `after`, as aware UTC; None when there is none."""
    after = _utc(after, "after")
    if spec.kind == ScheduleKind.CRON:
        cron = parse_cron(_required(spec.cron, "schedule"))
        return _next_cron_fire(cron, parse_timezone(spec.timezone), after)
    if spec.kind == ScheduleKind.INTERVAL:
        interval = _required(spec.interval, "interval")
        anchor = _utc(_required(spec.anchor, "start_at"), "start_at")
        return _next_interval_fire(interval, anchor, after)
    run_at = _utc(_required(spec.run_at, "run_at"), "run_at")
    return run_at if run_at > after else None


def iter_fires(
    spec: ScheduleSpec, after: datetime, until: datetime | None = None, limit: int | None = None
) -> Iterator[datetime]:
    """Successive firings in (after, until], at most `limit` of them."""
    until = None if until is None else _utc(until, "until")
    count = 0
    fire = next_fire_after(spec, after)
    while fire is not None and (until is None or fire <= until):
        if limit is not None and count >= limit:
            return
        yield fire
        count += 1
        fire = next_fire_after(spec, fire)


def preview_fires(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    return list(iter_fires(spec, after, limit=count))


def count_fires(spec: ScheduleSpec, after: datetime, until: datetime) -> int:
    """How many firings fall in (after, until], counted exactly without listing them."""
    after, until = _utc(after, "after"), _utc(until, "until")
    if until <= after:
        return 0
    if spec.kind == ScheduleKind.CRON:
        cron = parse_cron(_required(spec.cron, "schedule"))
        tz = parse_timezone(spec.timezone)
        spans = (
            _day_span(cron, tz, day, after, until) for day in _matching_days(cron, tz, after, until)
        )
        return sum(end - first for _, first, end in spans)
    if spec.kind == ScheduleKind.INTERVAL:
        first, last = _interval_bounds(spec, after, until)
        return max(0, last - first + 1)
    return 1 if after < _utc(_required(spec.run_at, "run_at"), "run_at") <= until else 0


def last_fires(spec: ScheduleSpec, after: datetime, until: datetime, count: int) -> list[datetime]:
    """The latest `count` firings in (after, until], ascending, without listing earlier ones."""
    after, until = _utc(after, "after"), _utc(until, "until")
    if count <= 0 or until <= after:
        return []
    if spec.kind == ScheduleKind.CRON:
        cron = parse_cron(_required(spec.cron, "schedule"))
        tz = parse_timezone(spec.timezone)
        found: list[datetime] = []
        for day in reversed(list(_matching_days(cron, tz, after, until))):
            found.extend(_fires_on_day(cron, tz, day, after, until))
            if len(found) >= count:
                break
        return sorted(found)[-count:]
    if spec.kind == ScheduleKind.INTERVAL:
        interval = _required(spec.interval, "interval")
        anchor = _utc(_required(spec.anchor, "start_at"), "start_at")
        first, last = _interval_bounds(spec, after, until)
        return [anchor + k * interval for k in range(max(first, last - count + 1), last + 1)]
    run_at = _utc(_required(spec.run_at, "run_at"), "run_at")
    return [run_at] if after < run_at <= until else []


def _next_interval_fire(interval: timedelta, anchor: datetime, after: datetime) -> datetime | None:
    if after < anchor:
        return anchor
    # timedelta floor division is exact integer arithmetic on microseconds.
    k = (after - anchor) // interval + 1
    try:
        return anchor + k * interval
    except OverflowError:
        return None


def _interval_bounds(spec: ScheduleSpec, after: datetime, until: datetime) -> tuple[int, int]:
    """The smallest and largest k with after < anchor + k * interval <= until (k >= 0)."""
    interval = _required(spec.interval, "interval")
    anchor = _utc(_required(spec.anchor, "start_at"), "start_at")
    first = 0 if after < anchor else (after - anchor) // interval + 1
    last = -1 if until < anchor else (until - anchor) // interval
    return first, last


def _next_cron_fire(cron: CronExpression, tz: ZoneInfo, after: datetime) -> datetime | None:
    try:
        day = _local_day(after, tz)
        last = day + timedelta(days=_HORIZON_DAYS)
        while day <= last:
            if day.month not in cron.months:
                day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
                continue
            if cron.matches_day(day):
                fire = _first_on_day(cron, tz, day, after)
                if fire is not None:
                    return _earliest_near_midnight(cron, tz, day, after, fire)
            day += _DAY
    except (OverflowError, ValueError):
        # Walking past year 9999: there is no further firing to give.
        return None
    return None


def _local_day(instant: datetime, tz: ZoneInfo) -> date:
    day = instant.astimezone(tz).date()
    # A fold that crosses midnight can put a later instant on the previous local day.
    lowest, highest = _day_offsets(tz, day - _DAY)
    return day - _DAY if lowest != highest else day


def _earliest_near_midnight(
    cron: CronExpression, tz: ZoneInfo, day: date, after: datetime, fire: datetime
) -> datetime:
    lowest, highest = _day_offsets(tz, day)
    following = day + _DAY
    if lowest == highest or not cron.matches_day(following):
        return fire
    later = _first_on_day(cron, tz, following, after)
    return fire if later is None else min(fire, later)


def _matching_days(
    cron: CronExpression, tz: ZoneInfo, after: datetime, until: datetime
) -> Iterator[date]:
    day = _local_day(after, tz)
    last = until.astimezone(tz).date() + _DAY
    while day <= last:
        if cron.matches_day(day):
            yield day
        day += _DAY


def _first_on_day(
    cron: CronExpression, tz: ZoneInfo, day: date, after: datetime
) -> datetime | None:
    start, first, end = _day_span(cron, tz, day, after, None)
    return _fire_at(cron, tz, day, start, first) if first < end else None


def _fires_on_day(
    cron: CronExpression, tz: ZoneInfo, day: date, after: datetime, until: datetime
) -> list[datetime]:
    start, first, end = _day_span(cron, tz, day, after, until)
    return [_fire_at(cron, tz, day, start, index) for index in range(first, end)]


def _day_span(
    cron: CronExpression, tz: ZoneInfo, day: date, after: datetime, until: datetime | None
) -> tuple[datetime | None, int, int]:
    """Where the day's firings in (after, until] sit, as (start, first, end) indexes.

    With a start (the UTC instant of local midnight) they index cron.times_of_day; without one
    the day holds a transition and they index _transition_day_fires.
    """
    lowest, highest = _day_offsets(tz, day)
    if lowest == highest:
        # Fast path, nearly every day: one offset all day, so wall minutes map straight to UTC.
        start = datetime.combine(day, time.min, tzinfo=UTC) - lowest
        times = cron.times_of_day
        first = bisect_right(times, (after - start) // _MINUTE)
        end = len(times) if until is None else bisect_right(times, (until - start) // _MINUTE)
        return start, first, end
    fires = _transition_day_fires(cron, tz, day)
    first = bisect_right(fires, after)
    end = len(fires) if until is None else bisect_right(fires, until)
    return None, first, end


def _fire_at(
    cron: CronExpression, tz: ZoneInfo, day: date, start: datetime | None, index: int
) -> datetime:
    if start is not None:
        return start + timedelta(minutes=cron.times_of_day[index])
    return _transition_day_fires(cron, tz, day)[index]


@lru_cache(maxsize=8192)
def _day_offsets(tz: ZoneInfo, day: date) -> tuple[timedelta, timedelta]:
    """The lowest and highest UTC offsets seen at the day's two ends, in either fold."""
    offsets = [
        _offset(datetime.combine(day, moment, tzinfo=tz).replace(fold=fold))
        for moment in (time.min, time.max)
        for fold in (0, 1)
    ]
    return min(offsets), max(offsets)


@lru_cache(maxsize=512)
def _transition_day_fires(cron: CronExpression, tz: ZoneInfo, day: date) -> tuple[datetime, ...]:
    fires: set[datetime] = set()
    for minute in cron.times_of_day:
        wall = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=tz)
        fires.update(_instants_for_wall(wall, tz, cron.hour_is_wildcard))
    return tuple(sorted(fires))


def _instants_for_wall(wall: datetime, tz: ZoneInfo, elapsed: bool) -> tuple[datetime, ...]:
    first = wall.replace(fold=0).astimezone(UTC)
    second = wall.replace(fold=1).astimezone(UTC)
    if first == second:
        return (first,)
    if first < second:
        # The wall time repeats (fall-back): elapsed-time jobs fire in both folds.
        return (first, second) if elapsed else (first,)
    # The wall time was skipped (PEP 495 gives fold=0 the offset from before the gap, so it lands
    # later): elapsed-time jobs have nothing to fire; others fire at the transition.
    return () if elapsed else (_transition_between(tz, second, first),)


@lru_cache(maxsize=256)
def _transition_between(tz: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant in (before, after] whose offset differs from the offset at `before`."""
    offset = _offset(before.astimezone(tz))
    low, high = 0, (after - before) // _SECOND
    while high - low > 1:
        middle = (low + high) // 2
        if _offset((before + middle * _SECOND).astimezone(tz)) == offset:
            low = middle
        else:
            high = middle
    return before + high * _SECOND


def _offset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"{moment!r} has no UTC offset")
    return offset
