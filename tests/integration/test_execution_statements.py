"""The executor's bookkeeping statements on real PostgreSQL, in-process: what each CAS decides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from beat_engine.clock import SystemClock
from jobs import own_partition, prepared, target_limits
from jobs.execution import ExecutionOutcome, run_delivery, run_execute
from jobs.models import DeadLetter, DedupKey, Job, JobRun, RunAttempt
from jobs.services.dedup import dedup_record
from jobs.services.runs import run_cancelled, run_dead_letter, run_retry, run_succeed
from jobs.services.starts import StartOutcome, run_start
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets in this process)
from tests.support.backends import terminate_my_backend
from tests.support.factories import T0, job_factory, run_factory
from tests.support.in_process import result_writer_stopped, statements_of  # noqa: F401

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("result_writer_stopped"),
]


@pytest.fixture(autouse=True)
def _attached_days_read() -> None:
    # A worker process reads which days have partitions at most once a minute
    # (jobs/own_partition.py), not per run: read them now, outside the counts.
    own_partition.reload_attached_days()


NOW = T0 + timedelta(days=1)


def _queued(job: Job, offset_s: int = 0) -> JobRun:
    at = T0 + timedelta(seconds=offset_s)
    return run_factory(
        job, scheduled_for=at, state=RunState.QUEUED, attempt=1, queued_at=NOW, due_at=None
    )


def _count_queries(action: Callable[[], Any]) -> list[str]:
    return statements_of(action)[1]


def test_start_returns_the_job_fields_and_opens_the_attempt_in_one_statement() -> None:
    job = job_factory(target_name="tests.echo", payload={"n": 1}, timeout=timedelta(seconds=7))
    run = _queued(job)
    results = []

    queries = _count_queries(
        lambda: results.append(run_start(run_id=run.id, attempt=1, worker="w:1", now=NOW))
    )

    started = results[0]
    assert len(queries) == 1
    assert started.outcome == StartOutcome.STARTED
    assert started.run is not None
    assert (started.run.payload, started.run.target.name) == ({"n": 1}, "tests.echo")
    assert started.run.target.timeout == timedelta(seconds=7)
    assert started.run.retry.max_attempts == job.max_attempts
    assert started.run.key_done is False
    after = JobRun.objects.get(id=run.id)
    assert (after.state, after.worker, after.started_at) == (RunState.RUNNING, "w:1", NOW)
    attempt = RunAttempt.objects.get(run_id=run.id)
    assert (attempt.attempt, attempt.worker, attempt.started_at) == (1, "w:1", NOW)


def test_a_second_delivery_of_the_same_attempt_is_stale_and_changes_nothing() -> None:
    run = _queued(job_factory())
    assert run_start(run_id=run.id, attempt=1, worker="w:1", now=NOW).outcome == (
        StartOutcome.STARTED
    )

    again = run_start(run_id=run.id, attempt=1, worker="w:2", now=NOW + timedelta(seconds=1))

    assert again.outcome == StartOutcome.STALE
    assert JobRun.objects.get(id=run.id).worker == "w:1"
    assert RunAttempt.objects.get(run_id=run.id).worker == "w:1"


def test_forbid_skips_while_another_run_of_the_job_is_running() -> None:
    job = job_factory(concurrency_policy="forbid")
    first, second = _queued(job), _queued(job, offset_s=60)
    assert run_start(run_id=first.id, attempt=1, worker="w", now=NOW).outcome == (
        StartOutcome.STARTED
    )

    assert run_start(run_id=second.id, attempt=1, worker="w", now=NOW).outcome == (
        StartOutcome.SKIPPED
    )
    assert JobRun.objects.get(id=second.id).state == RunState.SKIPPED
    assert not RunAttempt.objects.filter(run_id=second.id).exists()


def test_replace_flags_the_running_run_only_when_the_new_run_starts() -> None:
    job = job_factory(concurrency_policy="replace")
    first = _queued(job)
    run_start(run_id=first.id, attempt=1, worker="w", now=NOW)
    second = _queued(job, offset_s=60)
    JobRun.objects.filter(id=second.id).update(state=RunState.CANCELLED, finished_at=NOW)

    # A stale delivery of a run that cannot start must not stop the one that is running.
    stale = run_start(run_id=second.id, attempt=1, worker="w", now=NOW)

    assert stale.outcome == StartOutcome.STALE
    assert JobRun.objects.get(id=first.id).cancel_requested is False
    third = _queued(job, offset_s=120)
    assert run_start(run_id=third.id, attempt=1, worker="w", now=NOW).outcome == (
        StartOutcome.STARTED
    )
    assert JobRun.objects.get(id=first.id).cancel_requested is True


@pytest.mark.parametrize("critical", [True, False])
def test_start_reports_a_completed_key_only_for_critical_jobs(critical: bool) -> None:
    job = job_factory(critical=critical)
    run = _queued(job)
    dedup_record(key=run.dedup_key, tenant_id=run.tenant_id, job_id=job.id, run_id=None, now=NOW)

    started = run_start(run_id=run.id, attempt=1, worker="w", now=NOW)

    assert started.run is not None
    assert started.run.key_done is critical


def test_success_records_result_attempt_and_key_in_one_statement() -> None:
    run = _queued(job_factory())
    run_start(run_id=run.id, attempt=1, worker="w", now=NOW)
    accepted = []

    queries = _count_queries(
        lambda: accepted.append(
            run_succeed(run_id=run.id, attempt=1, now=NOW, result={"ok": [1, 2]})
        )
    )

    assert (len(queries), accepted) == (1, [True])
    done = JobRun.objects.get(id=run.id)
    assert (done.state, done.result, done.finished_at, done.lease_until) == (
        RunState.SUCCEEDED,
        {"ok": [1, 2]},
        NOW,
        None,
    )
    assert RunAttempt.objects.get(run_id=run.id).outcome == AttemptOutcome.SUCCEEDED
    assert DedupKey.objects.get(key=run.dedup_key).run_id == run.id


def test_a_zombie_success_is_refused_and_only_noted_on_its_own_attempt() -> None:
    run = _queued(job_factory())
    run_start(run_id=run.id, attempt=1, worker="w", now=NOW)
    RunAttempt.objects.filter(run_id=run.id).update(outcome=AttemptOutcome.LOST)
    JobRun.objects.filter(id=run.id).update(state=RunState.QUEUED, attempt=2, lease_until=None)

    assert run_succeed(run_id=run.id, attempt=1, now=NOW, result={"zombie": True}) is False

    after = JobRun.objects.get(id=run.id)
    assert (after.state, after.attempt, after.result) == (RunState.QUEUED, 2, None)
    old = RunAttempt.objects.get(run_id=run.id, attempt=1)
    assert old.outcome == AttemptOutcome.LOST
    assert old.error.startswith("late succeeded refused")
    assert not DedupKey.objects.filter(key=run.dedup_key).exists()


def test_retry_cancel_and_dead_letter_each_close_the_attempt() -> None:
    job = job_factory()
    retried, cancelled, dead = _queued(job), _queued(job, 60), _queued(job, 120)
    for run in (retried, cancelled, dead):
        run_start(run_id=run.id, attempt=1, worker="w", now=NOW)
    due = NOW + timedelta(seconds=30)

    assert run_retry(run_id=retried.id, attempt=1, due_at=due, error="boom", now=NOW)
    assert run_cancelled(run_id=cancelled.id, attempt=1, error="cancelled on request", now=NOW)
    assert run_dead_letter(run_id=dead.id, attempt=1, error="last", now=NOW, result=None)

    assert JobRun.objects.get(id=retried.id).due_at == due
    states = dict(JobRun.objects.filter(job=job).values_list("id", "state"))
    assert states == {
        retried.id: RunState.RETRY_WAIT,
        cancelled.id: RunState.CANCELLED,
        dead.id: RunState.DEAD,
    }
    outcomes = dict(RunAttempt.objects.filter(run__job=job).values_list("run_id", "outcome"))
    assert outcomes[cancelled.id] == AttemptOutcome.CANCELLED
    assert outcomes[retried.id] == outcomes[dead.id] == AttemptOutcome.FAILED
    letter = DeadLetter.objects.get(run_id=dead.id)
    assert (letter.job_id, letter.attempts, letter.last_error) == (job.id, 1, "last")
    assert not DedupKey.objects.filter(job=job).exists()


def test_a_quick_run_costs_two_statements_and_no_heartbeat() -> None:
    run = _queued(job_factory(target_name="tests.echo"))
    outcomes = []
    # A worker process reads the per-target rate limits once every few seconds
    # (jobs/target_limits.py LimitCache), not per run: read them now, outside the count.
    target_limits._cache.reload()

    queries = _count_queries(
        lambda: outcomes.append(run_execute(run_id=run.id, attempt=1, clock=SystemClock()))
    )

    assert outcomes == [ExecutionOutcome.SUCCEEDED]
    # The start and the outcome; the target ran on a reused thread and wrote nothing itself.
    assert len(queries) == 2
    assert JobRun.objects.get(id=run.id).heartbeat_at == JobRun.objects.get(id=run.id).started_at


def test_the_start_and_the_outcome_are_prepared_once_per_connection() -> None:
    job = job_factory()
    runs = [_queued(job, offset_s=60 * n) for n in range(3)]

    for run in runs:
        assert run_start(run_id=run.id, attempt=1, worker="w", now=NOW).outcome == (
            StartOutcome.STARTED
        )
        assert run_succeed(run_id=run.id, attempt=1, now=NOW, result=None)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%jobs_jobrun%'"
        )
        prepared = [row[0] for row in cursor.fetchall()]
    # One start and one success statement, each prepared at its first run and reused after.
    assert len(prepared) == 2, prepared
    assert any("WITH refused AS" in text for text in prepared)
    assert any("WITH finished AS" in text for text in prepared)


def test_a_delivery_sends_no_health_probe_before_the_start(monkeypatch: Any) -> None:
    run = _queued(job_factory(target_name="tests.echo"))
    connection.ensure_connection()
    probes = []
    real = connection.is_usable
    monkeypatch.setattr(connection, "is_usable", lambda: probes.append(1) or real())

    outcome = run_delivery(str(run.id), 1, clock=SystemClock())

    assert outcome == ExecutionOutcome.SUCCEEDED.value
    assert probes == []
    assert JobRun.objects.get(id=run.id).state == RunState.SUCCEEDED


def test_a_delivery_whose_idle_connection_the_server_closed_runs_once_on_a_new_one() -> None:
    run = _queued(job_factory(target_name="tests.echo"))
    connection.ensure_connection()
    before = connection.connection.info.backend_pid
    terminate_my_backend()
    try:
        outcome = run_delivery(str(run.id), 1, clock=SystemClock())
        after = connection.connection.info.backend_pid
    finally:
        # Whatever happened above, the test's teardown gets a working connection.
        connection.close()

    assert outcome == ExecutionOutcome.SUCCEEDED.value
    assert after != before
    done = JobRun.objects.get(id=run.id)
    assert (done.state, done.attempt) == (RunState.SUCCEEDED, 1)
    assert RunAttempt.objects.filter(run_id=run.id).count() == 1


@pytest.fixture
def generic_plans() -> Iterator[None]:
    """A worker's connection, as Celery's worker_init leaves it (jobs/prepared.py)."""
    connection.close()
    prepared.install_generic_plans()
    try:
        yield
    finally:
        connection_created.disconnect(dispatch_uid=prepared.GENERIC_PLANS_UID)
        connection.close()


@pytest.mark.usefixtures("generic_plans")
def test_a_workers_start_and_outcome_are_planned_once_per_connection() -> None:
    job = job_factory()
    runs = [_queued(job, offset_s=60 * n) for n in range(8)]
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"

    for run in runs:
        assert run_start(run_id=run.id, attempt=1, worker="w", now=NOW).outcome == (
            StartOutcome.STARTED
        )
        assert run_succeed(run_id=run.id, attempt=1, now=NOW, result=None)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%jobs_jobrun%'"
        )
        plans = cursor.fetchall()
    # Both statements ran eight times, each time on its one generic plan: none planned again.
    assert sorted(plans) == [(8, 0), (8, 0)], plans
    assert JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() == 8


@pytest.mark.usefixtures("generic_plans")
def test_the_setting_is_sent_once_per_server_session() -> None:
    connection.ensure_connection()
    # Announced again for the same session, as a pool hands a connection out again.
    again = _count_queries(
        lambda: connection_created.send(sender=type(connection), connection=connection)
    )
    assert prepared.GENERIC_PLANS_SQL not in again

    connection.close()
    fresh = _count_queries(connection.ensure_connection)
    assert fresh.count(prepared.GENERIC_PLANS_SQL) == 1
