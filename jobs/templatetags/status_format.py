"""Template filters of the status pages: durations and instants as operators read them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import template

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    """1.234 s, 850 ms, 3 min 05 s, 2 h 04 min; an em dash for nothing."""
    if value is None:
        return "—"
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.3f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours} h {minutes:02d} min"


@register.filter
def secs(value: float | None) -> str:
    """A number of seconds, spelled as ``duration`` spells it."""
    return duration(None if value is None else timedelta(seconds=value))


@register.filter
def utc(value: datetime | None) -> str:
    """2026-01-01 12:00:00.123 UTC, to the millisecond: attempts are often milliseconds apart."""
    if value is None:
        return "—"
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d} UTC"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


@register.filter
def wall(value: datetime | None) -> str:
    """The instant in its own zone (Django's ``date`` filter would convert it to UTC)."""
    if value is None:
        return "—"
    return value.strftime("%a %Y-%m-%d %H:%M:%S %Z")
