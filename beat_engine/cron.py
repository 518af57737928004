"""Cron expressions: parsing the five fields (Vixie syntax) and checking they can ever fire."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

# Syntax, as parsed below (Vixie cron):
#
# * Five fields: minute hour day-of-month month day-of-week. Items are `*`, `N`, `A-B`, and any
#   of those with a step `/S`; `N/S` means `N-max/S`. Months take JAN-DEC and days SUN-SAT
#   (any case); day-of-week 7 is Sunday. Macros: @hourly @daily @midnight @weekly @monthly
#   @yearly @annually. @reboot is rejected: a scheduler has no boot to attach it to.
# * Day matching: if day-of-month or day-of-week begins with `*` (so `*/2` counts, as in Vixie)
#   a day must match both fields; when both are restricted it must match either.

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


class ScheduleError(ValueError):
    """Bad schedule input; `field` names the offending input, str(error) says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


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


def cron_fields(expr: str) -> list[str]:
    """The five field texts of ``expr``, a macro replaced by what it stands for."""
    text = _clean_cron_text(expr)
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            raise ScheduleError("schedule", _macro_message(text))
        return macro.split()
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            "schedule",
            f"expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {text!r}",
        )
    return fields


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> CronExpression:
    text = _clean_cron_text(expr)
    fields = cron_fields(text)
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
