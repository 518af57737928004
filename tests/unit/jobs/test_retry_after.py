"""Retry-After parsing: delay-seconds and HTTP-dates against an injected now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.retry_after import http_date, retry_after_delay
from tests.support.clock import FakeClock

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120),
        ("  7 ", 7),
        ("0", 0),
        # Each HTTP-date form RFC 9110 requires a recipient to accept.
        ("Sun, 01 Mar 2026 12:00:30 GMT", 30),
        ("Sunday, 01-Mar-26 12:01:00 GMT", 60),
        ("Sun Mar  1 12:00:05 2026", 5),
        # A date already past asks for no wait.
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0),
    ],
)
def test_retry_after_gives_the_wait_it_asks_for(value: str, seconds: int) -> None:
    assert retry_after_delay(value, now=NOW) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "value", ["", "soon", "-5", "1.5", "+3", "\u0663", "Sun, 32 Mar 2026 12:00:00 GMT", "12:00"]
)
def test_malformed_retry_after_is_ignored(value: str) -> None:
    assert retry_after_delay(value, now=NOW) is None


def test_a_date_is_measured_from_the_injected_now() -> None:
    clock = FakeClock(NOW)
    value = "Sun, 01 Mar 2026 12:10:00 GMT"
    assert retry_after_delay(value, now=clock.now()) == timedelta(minutes=10)
    clock.advance(timedelta(minutes=4))
    assert retry_after_delay(value, now=clock.now()) == timedelta(minutes=6)


def test_huge_delay_seconds_do_not_overflow() -> None:
    delay = retry_after_delay("9" * 40, now=NOW)
    assert delay is not None
    assert delay >= timedelta(days=3650)


def test_http_date_is_aware_utc() -> None:
    parsed = http_date("Sun, 01 Mar 2026 12:00:30 GMT")
    assert parsed == NOW + timedelta(seconds=30)
    assert parsed is not None
    assert parsed.utcoffset() == timedelta(0)
    assert http_date("not a date") is None
