"""Cancel is final and one lock order (docs/architecture.md, Invariants), statement by statement
on real PostgreSQL: what the start, the outcomes and the reaper do with a run whose cancel was
requested, and a worker's outcome write that loses a deadlock."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import redis
from django.db import connection
from prometheus_client import REGISTRY

from beat_engine.fencing import epoch_take
from beat_engine.timers import fire_timers
from jobs.models import DeadLetter, DedupKey, Job, JobRun, RunAttempt
from jobs.services.runs import run_dead_letter, run_fail, run_retry, run_succeed
from jobs.services.starts import StartOutcome, run_start
from jobs.states import AttemptOutcome, RunState
from tests.support.factories import T0, job_factory, run_factory, running_run_factory
from tests.support.waiting import test_database_url, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = T0 + timedelta(seconds=30)


def _flagged_running(job: Job, offset_s: int = 0) -> JobRun:
    run = running_run_factory(
        job, scheduled_for=T0 + timedelta(seconds=offset_s), cancel_requested=True
    )
    RunAttempt.objects.create(run=run, attempt=1, worker="w", started_at=T0)
    return run


def test_queued_run_whose_cancel_was_requested_is_cancelled_by_its_start() -> None:
    # As an older reaper left it: re-queued as attempt 2 with the cancel flag still set.
    job = job_factory()
    run = run_factory(
        job, scheduled_for=T0, state=RunState.QUEUED, attempt=2, queued_at=T0, due_at=None,
        cancel_requested=True,
    )  # fmt: skip

    started = run_start(run_id=run.id, attempt=2, worker="w", now=NOW)

    assert started.outcome == StartOutcome.STALE
    run.refresh_from_db()
    assert (run.state, run.finished_at) == (RunState.CANCELLED, NOW)
    assert "before attempt 2 started" in run.last_error
    assert not RunAttempt.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    "finish",
    [
        lambda run: run_retry(
            run_id=run.id, attempt=1, due_at=NOW + timedelta(seconds=5), error="boom", now=NOW
        ),
        lambda run: run_dead_letter(run_id=run.id, attempt=1, error="boom", now=NOW),
        lambda run: run_fail(run_id=run.id, attempt=1, error="boom", now=NOW),
    ],
    ids=["retry", "dead_letter", "fail"],
)
def test_failed_attempt_of_a_run_whose_cancel_was_requested_ends_it_cancelled(
    redis_client: redis.Redis, finish: Any
) -> None:
    run = _flagged_running(job_factory(max_attempts=3))

    assert finish(run) == RunState.CANCELLED

    run.refresh_from_db()
    assert (run.state, run.due_at, run.finished_at, run.lease_until) == (
        RunState.CANCELLED, None, NOW, None,
    )  # fmt: skip
    assert run.last_error == "cancelled on request; attempt 1 ended: boom"
    assert RunAttempt.objects.get(run=run).outcome == AttemptOutcome.FAILED
    assert not DeadLetter.objects.filter(run=run).exists()


def test_successful_attempt_of_a_run_whose_cancel_was_requested_stays_succeeded() -> None:
    # The effect happened: the run says so, and its key is recorded.
    run = _flagged_running(job_factory())

    assert run_succeed(run_id=run.id, attempt=1, now=NOW, result={"ok": True})

    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert DedupKey.objects.filter(key=run.dedup_key).exists()


def test_reaper_ends_a_lost_run_whose_cancel_was_requested_instead_of_queueing_it() -> None:
    job = job_factory(max_attempts=3)
    flagged = _flagged_running(job)
    plain = running_run_factory(job, scheduled_for=T0 + timedelta(seconds=1))
    epochs = {job.partition: epoch_take(partition=job.partition, node="n", now=NOW)}
    past_leases = T0 + timedelta(minutes=2)

    result = fire_timers(epochs, now=past_leases, limit=10)

    flagged.refresh_from_db()
    plain.refresh_from_db()
    assert (flagged.state, flagged.attempt, flagged.finished_at) == (
        RunState.CANCELLED, 1, past_leases,
    )  # fmt: skip
    assert RunAttempt.objects.get(run=flagged).outcome == AttemptOutcome.LOST
    # The control: without a cancel, the same expired lease becomes attempt 2.
    assert (plain.state, plain.attempt) == (RunState.QUEUED, 2)
    assert [queued.run_id for queued in result.queued] == [plain.id]
    assert result.cancelled == 1


def _backend_waiting_on_a_lock(other_than: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> %s",
            [other_than],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def test_outcome_write_that_loses_a_deadlock_is_retried_not_abandoned(
    redis_client: redis.Redis,
) -> None:
    job = job_factory()
    run = running_run_factory(job, scheduled_for=T0)
    RunAttempt.objects.create(run=run, attempt=1, worker="w", started_at=T0)
    retries = REGISTRY.get_sample_value("scheduler_outcome_write_retries_total")
    outcome: list[Any] = []

    def worker() -> None:
        try:
            outcome.append(run_succeed(run_id=run.id, attempt=1, now=NOW, result={"ok": 1}))
        except Exception as exc:  # noqa: BLE001 - the test reports what the worker saw
            outcome.append(exc)
        finally:
            connection.close()

    # A transaction taking the opposite order with a conflicting lock (FOR UPDATE on the job
    # row, then the run): the worker's write holds the run and waits for FOR KEY SHARE on the
    # job; waiting first, it is the one PostgreSQL aborts.
    with psycopg.connect(test_database_url()) as other:
        other.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job.id])
        thread = threading.Thread(target=worker)
        thread.start()
        wait_until(
            lambda: _backend_waiting_on_a_lock(other.info.backend_pid),
            what="the outcome write to wait for the job row",
        )
        other.execute("UPDATE jobs_jobrun SET cancel_requested = true WHERE id = %s", [run.id])
        other.commit()
    thread.join(timeout=30)

    assert outcome == [True]
    run.refresh_from_db()
    assert (run.state, run.cancel_requested) == (RunState.SUCCEEDED, True)
    assert RunAttempt.objects.get(run=run).outcome == AttemptOutcome.SUCCEEDED
    assert retries is not None
    assert REGISTRY.get_sample_value("scheduler_outcome_write_retries_total") == retries + 1
