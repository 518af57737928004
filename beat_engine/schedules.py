"""Schedules: one-off, cron and interval specs, and the UTC instants at which they fire."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import TypeVar
from zoneinfo import ZoneInfo, available_timezones

# Cron semantics, as implemented below (Vixie cron, evaluated in the job's IANA time zone):
#
# * Five fields: minute hour day-of-month month day-of-week. Items are `*`, `N`, `A-B`, and any
#   of those with a step `/S`; `N/S` means `N-max/S`. Months take JAN-DEC and days SUN-SAT
#   (any case); day-of-week 7 is Sunday. Macros: @hourly @daily @midnight @weekly @monthly
#   @yearly @annually. @reboot is rejected: a scheduler has no boot to attach it to.
# * Day matching: if day-of-month or day-of-week begins with `*` (so `*/2` counts, as in Vixie)
#   a day must match both fields; when both are restricted it must match either.
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

_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_MONTH_LABELS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_NAMES: dict[str, dict[str, int]] = {
    "month": {label[:3].upper(): number for number, label in enumerate(_MONTH_LABELS, start=1)},
    "day-of-week": {
        name: number
        for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
    },
}
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# February counts 29 days: `0 0 29 2 *` is a leap-year job, not an impossible one.
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MAX_CRON_LENGTH = 128
_HORIZON_DAYS = 1830
_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)
_T = TypeVar("_T")


class ScheduleError(ValueError):
    """Bad schedule input; `field` names the offending input, str(error) says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class ScheduleKind(StrEnum):
    ONCE = "once"
    CRON = "cron"
    INTERVAL = "interval"


@dataclass(frozen=True)
class CronExpression:
    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    dom_star: bool
    dow_star: bool
    hour_is_wildcard: bool
    # Minutes since local midnight at which a matching day fires, sorted: the fast path bisects it.
    times_of_day: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        times = sorted(hour * 60 + minute for hour in self.hours for minute in self.minutes)
        object.__setattr__(self, "times_of_day", tuple(times))

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = day.isoweekday() % 7 in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> CronExpression:
    text = _clean_cron_text(expr)
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            raise ScheduleError("schedule", _macro_message(text))
        fields = macro.split()
    else:
        fields = text.split()
        if len(fields) != 5:
            raise ScheduleError(
                "schedule",
                f"expected 5 fields (minute hour day-of-month month day-of-week), "
                f"got {len(fields)} in {text!r}",
            )
    minutes, hours, doms, months, dows = (
        _parse_field(token, *spec) for token, spec in zip(fields, _FIELDS, strict=True)
    )
    cron = CronExpression(
        source=text,
        minutes=minutes,
        hours=hours,
        days_of_month=doms,
        months=months,
        days_of_week=frozenset(day % 7 for day in dows),
        dom_star=fields[2].startswith("*"),
        dow_star=fields[4].startswith("*"),
        hour_is_wildcard=fields[1].startswith("*") or "/" in fields[1],
    )
    _check_can_fire(cron)
    return cron


def _clean_cron_text(expr: str) -> str:
    if not isinstance(expr, str):
        raise ScheduleError("schedule", "schedule must be a string such as '0 9 * * *'")
    if len(expr) > _MAX_CRON_LENGTH:
        raise ScheduleError(
            "schedule", f"schedule is {len(expr)} characters long; the limit is {_MAX_CRON_LENGTH}"
        )
    for char in expr:
        if char in " \t" or " " < char <= "~":
            continue
        kind = "non-ASCII" if ord(char) > 127 else "control"
        raise ScheduleError("schedule", f"schedule contains a {kind} character {char!r}")
    text = expr.strip()
    if not text:
        raise ScheduleError("schedule", "schedule is empty; expected five fields like '0 9 * * *'")
    return text


def _macro_message(text: str) -> str:
    if text.lower() == "@reboot":
        return "@reboot is not supported: a schedule needs times, not a machine boot"
    return f"unknown macro {text!r}; known macros are {', '.join(sorted(_MACROS))}"


def _parse_field(token: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in token.split(","):
        if not item:
            raise _field_error(name, token, "empty item (doubled or trailing comma)")
        values.update(_parse_item(item, token, name, low, high))
    return frozenset(values)


def _parse_item(item: str, token: str, name: str, low: int, high: int) -> range:
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit():
            raise _field_error(name, token, f"step {step_text!r} is not a number")
        step = int(step_text)
        if not 1 <= step <= high:
            raise _field_error(name, token, f"step {step} is out of range 1-{high}")
    if base == "*":
        return range(low, high + 1, step)
    first, dash, last = base.partition("-")
    start = _parse_value(first, token, name, low, high)
    if not dash:
        # Vixie: `5/15` means 5-max/15; a bare value is just itself.
        return range(start, (high if slash else start) + 1, step)
    end = _parse_value(last, token, name, low, high)
    if start > end:
        raise _field_error(name, token, f"range {first}-{last} is reversed (start after end)")
    return range(start, end + 1, step)


def _parse_value(text: str, token: str, name: str, low: int, high: int) -> int:
    if not text:
        raise _field_error(name, token, "incomplete range or missing value")
    if text.isdigit():
        value = int(text)
        if not low <= value <= high:
            raise _field_error(name, token, f"{value} is out of range {low}-{high}")
        return value
    names = _NAMES.get(name)
    if names is None:
        raise _field_error(name, token, f"{text!r} is not a number")
    if text.upper() not in names:
        known = f"{min(names, key=names.__getitem__)}-{max(names, key=names.__getitem__)}"
        raise _field_error(name, token, f"unknown name {text!r} (use {known} or numbers)")
    return names[text.upper()]


def _field_error(name: str, token: str, reason: str) -> ScheduleError:
    return ScheduleError("schedule", f"{name} field {token!r}: {reason}")


def _check_can_fire(cron: CronExpression) -> None:
    # Only "day-of-month AND any weekday" can be impossible: with both fields restricted any
    # weekday fires, and a starred day-of-month (even `*/n`) always includes the 1st.
    if cron.dom_star or not cron.dow_star:
        return
    if any(day <= _DAYS_IN_MONTH[month - 1] for month in cron.months for day in cron.days_of_month):
        return
    days = sorted(cron.days_of_month)
    day_text = (
        f"day {days[0]} does" if len(days) == 1 else f"days {_join(map(str, days), 'and')} do"
    )
    months = _join((_MONTH_LABELS[month - 1] for month in sorted(cron.months)), "or")
    raise ScheduleError("schedule", f"never fires: {day_text} not occur in {months}")


def _join(words: Iterable[str], last: str) -> str:
    items = list(words)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


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
