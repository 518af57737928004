"""Cron expressions in words (cron-descriptor) and next firings in the job's own zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import Job, JobKind
from jobs.schedule_preview import describe_cron, next_firings


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 9 * * 1-5", "At 09:00, Monday through Friday"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("30 2 * * 0", "At 02:30, only on Sunday"),
        ("0 0 * * 7", "At 00:00, only on Sunday"),
        ("@daily", "At 00:00"),
        ("@hourly", "Every hour"),
        ("5 4 1 jan *", "At 04:05, on day 1 of the month, only in January"),
        # Both day fields restricted: Vixie cron fires on either, and the words say "or".
        ("0 0 1 * 1", "At 00:00, on day 1 of the month, or on Monday"),
        ("*/5 9-17 * * MON-FRI", "Every 5 minutes, between 09:00 and 17:59, Monday through Friday"),
    ],
)
def test_describe_cron(expression: str, words: str) -> None:
    assert describe_cron(expression) == words


@pytest.mark.parametrize("expression", ["61 * * * *", "@reboot", "* * *", ""])
def test_describe_cron_names_a_bad_expression(expression: str) -> None:
    assert describe_cron(expression).startswith("not a valid schedule: ")


def test_next_firings_are_in_the_jobs_zone_across_a_dst_change() -> None:
    job = Job(kind=JobKind.CRON, cron_expression="0 9 * * 1-5", timezone="Europe/Paris")
    # Thursday 26 March 2026; Paris moves to summer time on Sunday 29 March.
    after = datetime(2026, 3, 26, 12, 0, tzinfo=UTC)

    fires = next_firings(job, now=after, count=3)

    assert [f.isoformat() for f in fires] == [
        "2026-03-27T09:00:00+01:00",
        "2026-03-30T09:00:00+02:00",
        "2026-03-31T09:00:00+02:00",
    ]


def test_next_firings_of_an_interval_and_a_one_off_job() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    every = Job(kind=JobKind.INTERVAL, interval_seconds=90, anchor_at=anchor, timezone="UTC")
    once = Job(kind=JobKind.ONCE, run_at=anchor + timedelta(hours=1), timezone="Asia/Tokyo")

    assert next_firings(every, now=anchor, count=2) == [
        anchor + timedelta(seconds=90),
        anchor + timedelta(seconds=180),
    ]
    assert [f.isoformat() for f in next_firings(once, now=anchor)] == ["2026-01-01T10:00:00+09:00"]
    assert next_firings(once, now=anchor + timedelta(hours=2)) == []
