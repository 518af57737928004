"""Retention on real PostgreSQL: expired dedup keys, closed dead letters and old stored results
are purged in bounded batches by one node at a time, and never a key that a live run or a
replay still needs (jobs/services/history_retention.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django_celery_results.models import TaskResult
from prometheus_client import REGISTRY

from beat_engine.clock import SystemClock
from jobs.execution import ExecutionOutcome, run_execute
from jobs.models import DeadLetter, DedupKey, Job, JobRun
from jobs.run_partitions import RUN_TABLE, partition_name
from jobs.services.dedup import dedup_record
from jobs.services.history_partitions import partitions_ensure
from jobs.services.history_retention import PURGE_LOCK_KEY, history_purge
from jobs.services.starts import run_start
from jobs.states import RunState
from tests.support import targets  # noqa: F401  (registers the test targets in this process)
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, run_factory
from tests.support.in_process import result_writer_stopped  # noqa: F401
from tests.support.partition_reads import drop_day_partitions, partitions_touched

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("result_writer_stopped"),
]

NOW = T0 + timedelta(days=60)
EXPIRED = NOW - timedelta(seconds=1)
LONG_AGO = NOW - timedelta(days=31)  # past the 30-day dead-letter retention
RECENTLY = NOW - timedelta(days=1)


def _purge(**kwargs: Any) -> Any:
    return history_purge(now=NOW, monotonic=FakeClock(T0).monotonic, **kwargs)


def _run(job: Job, offset_s: int, state: RunState, **fields: Any) -> JobRun:
    defaults: dict[str, Any] = {"attempt": 1, "due_at": None}
    if state in (RunState.PENDING, RunState.RETRY_WAIT):
        defaults["due_at"] = NOW
    if state == RunState.QUEUED:
        defaults["queued_at"] = NOW
    if state == RunState.RUNNING:
        defaults.update(started_at=NOW, lease_until=NOW + timedelta(minutes=1))
    if state in (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD, RunState.CANCELLED):
        defaults["finished_at"] = RECENTLY
    defaults.update(fields)
    return run_factory(job, scheduled_for=T0 + timedelta(seconds=offset_s), state=state, **defaults)


def _key(key: str, job: Job, run: JobRun | None, *, expires_at: datetime) -> None:
    DedupKey.objects.create(
        key=key, tenant_id=job.tenant_id, job=job, run=run,
        created_at=expires_at - timedelta(days=7), expires_at=expires_at,
    )  # fmt: skip


def _purged_total(table: str) -> float:
    value = REGISTRY.get_sample_value("scheduler_history_purged_rows_total", {"table": table})
    return value or 0.0


def test_expired_keys_are_purged_but_never_one_a_live_run_or_a_replay_needs() -> None:
    job = job_factory(critical=True)
    kept = {
        "pending": _run(job, 1, RunState.PENDING),
        "queued": _run(job, 2, RunState.QUEUED),
        "running": _run(job, 3, RunState.RUNNING),
        "retry_wait": _run(job, 4, RunState.RETRY_WAIT),
        # Its dead letter is open: a replay is one more attempt of the same firing.
        "dead": _run(job, 5, RunState.DEAD, finished_at=LONG_AGO),
        # A failed run may be replayed for the dead-letter retention after it ended.
        "failed-recently": _run(job, 6, RunState.FAILED, finished_at=RECENTLY),
    }
    gone = {
        "succeeded": _run(job, 7, RunState.SUCCEEDED),
        "cancelled": _run(job, 8, RunState.CANCELLED),
        "failed-long-ago": _run(job, 9, RunState.FAILED, finished_at=LONG_AGO),
    }
    for name, run in {**kept, **gone}.items():
        _key(name, job, run, expires_at=EXPIRED)
    # A client's own key (@idempotent: no run), expired, and a key still in its window.
    _key("client-expired", job, None, expires_at=EXPIRED)
    _key(
        "succeeded-unexpired", job, _run(job, 10, RunState.SUCCEEDED), expires_at=NOW + timedelta(1)
    )
    before = _purged_total("jobs_dedupkey")

    report = _purge()

    remaining = set(DedupKey.objects.values_list("key", flat=True))
    assert remaining == {*kept, "succeeded-unexpired"}
    assert report.deleted["jobs_dedupkey"] == len(gone) + 1
    assert _purged_total("jobs_dedupkey") - before == len(gone) + 1
    assert (report.more, report.locked_out) == (False, False)


def test_a_live_run_still_honours_its_own_key_past_its_expiry() -> None:
    # A critical callable recorded its key with its effect, then its attempt was lost; the
    # next attempt starts after the TTL. Its key is kept (above) and still counts.
    job = job_factory(critical=True)
    run = _run(job, 1, RunState.QUEUED, attempt=2)
    _key(run.dedup_key, job, run, expires_at=EXPIRED)

    started = run_start(run_id=run.id, attempt=2, worker="w", now=NOW)

    assert started.run is not None
    assert started.run.key_done is True
    # Recording it again for the same run is refused (the effect is done); a key recorded by
    # no run, or another one, is replaced once expired, as before.
    record: dict[str, Any] = {"key": run.dedup_key, "tenant_id": job.tenant_id, "now": NOW}
    assert dedup_record(job_id=job.id, run_id=run.id, **record) is False
    assert dedup_record(job_id=job.id, run_id=None, **record) is True


def test_a_pass_deletes_in_bounded_batches_and_stops_at_its_budget() -> None:
    job = job_factory()
    done = _run(job, 1, RunState.SUCCEEDED)
    for i in range(7):
        _key(f"k{i}", job, done if i == 0 else None, expires_at=EXPIRED)
    deletes: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().startswith("DELETE FROM jobs_dedupkey"):
            deletes.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        report = _purge(batch=3)

    assert (report.deleted["jobs_dedupkey"], len(deletes)) == (7, 3)
    assert not DedupKey.objects.exists()

    for i in range(4):
        _key(f"again{i}", job, None, expires_at=EXPIRED)
    ticks = iter([0.0, 0.0, 10.0])  # the deadline, one batch, then the budget is spent
    stopped = history_purge(now=NOW, monotonic=lambda: next(ticks), batch=3, budget_s=5.0)
    assert (stopped.deleted["jobs_dedupkey"], stopped.more) == (3, True)
    assert DedupKey.objects.count() == 1


def test_a_node_without_the_purge_lock_deletes_nothing() -> None:
    job = job_factory()
    _key("expired", job, None, expires_at=EXPIRED)
    holding, release = threading.Event(), threading.Event()

    def other_node() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PURGE_LOCK_KEY])
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=other_node)
    thread.start()
    try:
        assert holding.wait(10)
        report = _purge()
    finally:
        release.set()
        thread.join(10)

    assert (report.locked_out, report.total) == (True, 0)
    assert DedupKey.objects.filter(key="expired").exists()
    assert _purge().deleted["jobs_dedupkey"] == 1


def _letter(run: JobRun, *, moved_at: datetime, replayed_at: datetime | None) -> DeadLetter:
    return DeadLetter.objects.create(
        run=run, job_id=run.job_id, tenant_id=run.tenant_id, attempts=3, moved_at=moved_at,
        replayed_at=replayed_at, replay_count=0 if replayed_at is None else 1,
    )  # fmt: skip


def test_dead_letters_are_kept_until_replayed_and_closed_plus_the_retention() -> None:
    job = job_factory()
    letters = {
        # Open: its run is dead, whatever its age.
        "open": _letter(_run(job, 1, RunState.DEAD), moved_at=LONG_AGO, replayed_at=None),
        # Replayed, and dead again: open again.
        "dead-again": _letter(
            _run(job, 2, RunState.DEAD), moved_at=LONG_AGO, replayed_at=LONG_AGO
        ),
        # Replayed long ago and still in flight.
        "replaying": _letter(
            _run(job, 3, RunState.RETRY_WAIT), moved_at=LONG_AGO, replayed_at=LONG_AGO
        ),
        # Replayed and finished, but within the retention.
        "closed-recently": _letter(
            _run(job, 4, RunState.SUCCEEDED), moved_at=LONG_AGO, replayed_at=RECENTLY
        ),
        # Replayed and finished past the retention: purged.
        "closed-long-ago": _letter(
            _run(job, 5, RunState.SUCCEEDED), moved_at=LONG_AGO, replayed_at=LONG_AGO
        ),
    }  # fmt: skip

    report = _purge()

    remaining = set(DeadLetter.objects.values_list("id", flat=True))
    assert remaining == {letters[name].id for name in letters if name != "closed-long-ago"}
    assert report.deleted["jobs_deadletter"] == 1
    # The run keeps its own history; only the letter goes.
    assert JobRun.objects.filter(id=letters["closed-long-ago"].run_id).exists()


def test_stored_results_past_their_retention_are_purged() -> None:
    for name, done in (("old", LONG_AGO), ("recent", RECENTLY)):
        TaskResult.objects.create(task_id=f"{name}:1", status="SUCCESS")
        # date_done is auto_now: set after the insert.
        TaskResult.objects.filter(task_id=f"{name}:1").update(date_done=done)

    report = _purge()

    assert set(TaskResult.objects.values_list("task_id", flat=True)) == {"recent:1"}
    assert report.deleted["django_celery_results_taskresult"] == 1


@pytest.mark.parametrize("critical", [True, False])
def test_only_a_critical_jobs_success_records_its_key(critical: bool) -> None:
    # Only a critical job's start reads the key: a key per success of every other job was a
    # row nothing read, kept for the whole TTL.
    job = job_factory(target_name="tests.echo", critical=critical)
    now = SystemClock().now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )

    outcome = run_execute(run_id=run.id, attempt=1, clock=SystemClock())

    assert outcome == ExecutionOutcome.SUCCEEDED
    assert DedupKey.objects.filter(key=run.dedup_key).exists() is critical


@pytest.fixture
def far_days() -> Iterator[list[date]]:
    """Days with partitions of their own for one test, dropped after it (DDL outlives the
    transactional test's flush)."""
    days = [date(2033, 5, 10) + timedelta(days=n) for n in range(-3, 4)]
    partitions_ensure(days)
    yield days
    drop_day_partitions(days)


def test_the_purge_reads_only_the_partitions_its_keys_and_letters_name(
    far_days: list[date],
) -> None:
    """Each key's and letter's run is read by its id, not by a join that scans the history:
    with nested loops off, as the planner chooses at scale, the old NOT EXISTS and JOIN became
    hash joins over every partition."""
    day = far_days[3]
    at = datetime.combine(day, T0.timetz())
    job = job_factory()
    done = {"state": RunState.SUCCEEDED, "attempt": 1, "due_at": None, "finished_at": LONG_AGO}
    for other in far_days:
        run_factory(job, scheduled_for=datetime.combine(other, T0.timetz()) + timedelta(hours=1),
                    **done)  # fmt: skip
    _key("expired", job, run_factory(job, scheduled_for=at, **done), expires_at=EXPIRED)
    letter_run = run_factory(job, scheduled_for=at + timedelta(minutes=1), **done)
    _letter(letter_run, moved_at=LONG_AGO, replayed_at=LONG_AGO)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_nestloop = off")
        reports: list[Any] = []
        touched = partitions_touched(lambda: reports.append(_purge()))
        (report,) = reports

    assert (report.deleted["jobs_dedupkey"], report.deleted["jobs_deadletter"]) == (1, 1)
    assert touched == {partition_name(RUN_TABLE, day)}
