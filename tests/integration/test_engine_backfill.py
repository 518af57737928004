"""manage.py backfill: idempotent, ordered, rate-limited, refuses bad ranges."""

from __future__ import annotations

import io
from datetime import date, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from jobs.management.commands import backfill
from jobs.models import JobRun
from jobs.services import history_partitions
from jobs.states import RunState
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
NOW = T0 + timedelta(days=2)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock(NOW)
    monkeypatch.setattr(backfill, "clock", clock)
    return clock


def _backfill(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("backfill", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_backfill_creates_missing_firings_as_pending_and_is_idempotent(
    fake_clock: FakeClock,
) -> None:
    job = job_factory(cron="0 * * * *")  # hourly, from T0
    existing = T0 + timedelta(hours=3)
    JobRun.objects.create(
        job=job, tenant_id=job.tenant_id, partition=job.partition, scheduled_for=existing,
        state=RunState.SUCCEEDED, attempt=1, finished_at=existing, dedup_key="x",
        created_at=existing,
    )  # fmt: skip
    args = [str(job.id), "--start", "2026-01-01T01:00Z", "--end", "2026-01-01T06:00Z"]
    out, err = _backfill(*args, "--rate", "2")
    assert "created 5 of 6" in out
    assert "6/6" in err  # the progress bar
    runs = JobRun.objects.filter(job=job, trigger="backfill").order_by("scheduled_for")
    assert [r.scheduled_for.hour for r in runs] == [1, 2, 4, 5, 6]
    assert {r.state for r in runs} == {RunState.PENDING}
    # Rate limited: 6 firings at 2/s took 3 seconds of the (fake) clock.
    assert fake_clock.now() - NOW >= timedelta(seconds=2.5)
    out, _ = _backfill(*args, "--rate", "1000")
    assert "created 0 of 6" in out
    assert JobRun.objects.filter(job=job).count() == 6


def test_dry_run_lists_and_creates_nothing() -> None:
    job = job_factory(cron="0 * * * *")
    out, _ = _backfill(str(job.id), "--start", "2026-01-01T01:00Z", "--end", "2026-01-01T02:00Z",
                       "--dry-run")  # fmt: skip
    assert "would create 2026-01-01T01:00:00+00:00" in out
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2026-01-01T05:00Z", "2026-01-01T01:00Z", "is after --end"),
        ("2026-01-01T05:00Z", "2027-01-01T00:00Z", "in the future"),
        ("2026-01-01T05:00", "2026-01-01T06:00Z", "needs a UTC offset"),
        ("yesterday", "2026-01-01T06:00Z", "not an ISO 8601"),
    ],
)
def test_bad_ranges_are_refused_with_a_clear_message(start: str, end: str, message: str) -> None:
    job = job_factory(cron="0 * * * *")
    with pytest.raises(CommandError, match=message):
        _backfill(str(job.id), "--start", start, "--end", end)
    assert not JobRun.objects.exists()


def test_too_large_range_needs_force() -> None:
    job = job_factory(interval=timedelta(seconds=1))
    args = [str(job.id), "--start", "2026-01-01T00:00Z", "--end", "2026-01-01T03:00Z"]
    with pytest.raises(CommandError, match="--force"):
        _backfill(*args)
    out, _ = _backfill(*args, "--force", "--rate", "100000")
    assert "created 10801 of 10801" in out


def test_backfill_creates_its_days_partitions_first(monkeypatch: pytest.MonkeyPatch) -> None:
    job = job_factory(cron="0 12 * * *")  # daily at noon
    # Four days far in the past; on demand at most the latest three get partitions.
    monkeypatch.setattr(history_partitions, "ON_DEMAND_MAX_DAYS", 3)
    out, _ = _backfill(str(job.id), "--start", "2020-03-01T00:00Z", "--end", "2020-03-04T23:00Z")
    assert "created 4 of 4" in out
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT scheduled_for::date, tableoid::regclass::text FROM jobs_jobrun"
            " WHERE job_id = %s ORDER BY scheduled_for",
            [job.id],
        )
        where = [(day.isoformat(), table) for day, table in cursor.fetchall()]
    assert where == [
        ("2020-03-01", "jobs_jobrun_default"),
        ("2020-03-02", "jobs_jobrun_p20200302"),
        ("2020-03-03", "jobs_jobrun_p20200303"),
        ("2020-03-04", "jobs_jobrun_p20200304"),
    ]
    assert {date(2020, 3, 2), date(2020, 3, 4)} <= history_partitions.partition_days(
        "jobs_runattempt"
    )
