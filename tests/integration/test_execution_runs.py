"""Real worker, real broker, real PostgreSQL: success, retry, dead letter and replay, duplicates."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command

from beat_engine.clock import SystemClock
from jobs.models import DeadLetter, Job, JobRun
from jobs.services.dead_letters import dead_letter_replay
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    queue_attempt,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _now() -> datetime:
    return SystemClock().now()


def _job(**overrides: Any) -> Job:
    fields: dict[str, Any] = {"target_name": "tests.echo", "now": _now()}
    fields.update(overrides)
    return job_factory(**fields)


def _queued_run(job: Job) -> JobRun:
    now = _now()
    return run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )


def _wait_state(run: JobRun, *states: RunState, worker: CeleryWorker) -> JobRun:
    def reached() -> bool:
        return JobRun.objects.get(id=run.id).state in states

    try:
        wait_until(reached, what=f"run {run.id} to reach {states}")
    except AssertionError:
        raise AssertionError(worker.log_tail()) from None
    return JobRun.objects.get(id=run.id)


def test_callable_success_records_run_attempt_context_and_key(worker: CeleryWorker) -> None:
    # Critical: only a critical job's success records its key (docs/history.md).
    job = _job(payload={"n": 1}, critical=True)
    run = _queued_run(job)
    publish_run(run.id, 1)

    done = _wait_state(run, RunState.SUCCEEDED, worker=worker)

    assert done.result is not None
    assert done.finished_at is not None
    assert done.started_at is not None
    assert done.worker
    assert done.lease_until is None
    assert done.result["payload"] == {"n": 1}
    context = done.result["context"]
    assert context["attempt"] == 1
    assert context["fencing_token"] == 1
    assert context["idempotency_key"] == run.dedup_key
    assert datetime.fromisoformat(context["scheduled_for"]) == run.scheduled_for
    (attempt,) = done.attempts.all()
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert attempt.worker == done.worker
    assert attempt.started_at is not None
    assert attempt.finished_at is not None
    assert job.dedupkey_set.filter(key=run.dedup_key).exists()


def test_named_celery_task_target_gets_payload_and_context(worker: CeleryWorker) -> None:
    job = _job(target_kind="task", target_name="tests.task_target", payload={"x": [1, 2]})
    run = _queued_run(job)
    publish_run(run.id, 1)

    done = _wait_state(run, RunState.SUCCEEDED, worker=worker)

    assert done.result is not None
    assert done.result["payload"] == {"x": [1, 2]}
    assert done.result["scheduler_context"]["run_id"] == str(run.id)
    assert done.result["scheduler_context"]["idempotency_key"] == run.dedup_key


def test_failure_waits_in_database_then_next_attempt_succeeds(worker: CeleryWorker) -> None:
    job = _job(
        target_name="tests.flaky",
        retry_base_delay=timedelta(seconds=2),
        retry_max_delay=timedelta(seconds=8),
    )
    run = _queued_run(job)
    before = _now()
    publish_run(run.id, 1)

    waiting = _wait_state(run, RunState.RETRY_WAIT, worker=worker)

    # Full jitter within [min(base, 1 s), base * 2**0]: a database timer, not a broker ETA.
    assert waiting.due_at is not None
    assert before + timedelta(seconds=1) <= waiting.due_at <= _now() + timedelta(seconds=2)
    assert "flaky failure on attempt 1" in waiting.last_error
    queue_attempt(run, attempt=2, now=_now())
    done = _wait_state(run, RunState.SUCCEEDED, worker=worker)
    assert done.result == {"succeeded_on": 2}
    outcomes = list(done.attempts.values_list("attempt", "outcome"))
    assert outcomes == [(1, AttemptOutcome.FAILED), (2, AttemptOutcome.SUCCEEDED)]


def _dead_letter_queue_length() -> int:
    client = redis.Redis.from_url(settings.REDIS_URL)
    return int(client.llen(settings.SCHEDULER["DEAD_LETTER_QUEUE"]))


def test_last_failure_dead_letters_and_replay_runs_a_new_attempt(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.always_fails", max_attempts=1)
    first, second = _queued_run(job), _queued_run(job)
    notices = _dead_letter_queue_length()
    publish_run(first.id, 1)
    publish_run(second.id, 1)

    dead = _wait_state(first, RunState.DEAD, worker=worker)
    _wait_state(second, RunState.DEAD, worker=worker)

    letter = DeadLetter.objects.get(run=first)
    assert letter.attempts == 1
    assert "always fails" in letter.last_error
    assert dead.attempts.get().outcome == AttemptOutcome.FAILED
    wait_until(lambda: _dead_letter_queue_length() == notices + 2, what="dead-letter notices")

    out = StringIO()
    call_command("replay_dead_letters", "--job", str(job.id), "--dry-run", stdout=out)
    assert "would replay 2 of 2" in out.getvalue()
    assert set(JobRun.objects.filter(job=job).values_list("state", flat=True)) == {RunState.DEAD}

    out = StringIO()
    call_command("replay_dead_letters", "--job", str(job.id), "--limit", "1", stdout=out)
    assert "replayed 1 of 1" in out.getvalue()
    replayed = JobRun.objects.get(id=first.id)
    assert replayed.state == RunState.PENDING
    assert replayed.replayed_count == 1
    letter.refresh_from_db()
    assert letter.replay_count == 1
    assert letter.replayed_at is not None
    assert dead_letter_replay(run_id=second.id, now=_now()) is True
    assert dead_letter_replay(run_id=second.id, now=_now()) is False

    # The engine queues a replayed run as attempt + 1; it fails again and returns to dead.
    queue_attempt(replayed, attempt=2, now=_now())
    _wait_state(first, RunState.DEAD, worker=worker)
    letter.refresh_from_db()
    assert letter.attempts == 2
    assert letter.replay_count == 1


def test_duplicate_and_stale_messages_are_dropped_and_counted(worker: CeleryWorker) -> None:
    job = _job()
    run = _queued_run(job)
    publish_run(run.id, 1)
    done = _wait_state(run, RunState.SUCCEEDED, worker=worker)
    before = worker.metric("scheduler_duplicate_deliveries_total")

    publish_run(run.id, 1)  # redelivery of the same attempt
    publish_run(run.id, 7)  # a message for an attempt that never was

    wait_until(
        lambda: worker.metric("scheduler_duplicate_deliveries_total") == before + 2,
        what="both duplicates counted",
    )
    again = JobRun.objects.get(id=run.id)
    assert (again.state, again.finished_at, again.worker) == (
        RunState.SUCCEEDED,
        done.finished_at,
        done.worker,
    )
    assert again.attempts.count() == 1


def test_timeout_ends_the_attempt_and_counts_as_a_failure(worker: CeleryWorker) -> None:
    job = _job(
        target_name="tests.block",
        payload={"max_s": 60},
        timeout=timedelta(seconds=1),
        max_attempts=2,
    )
    run = _queued_run(job)
    publish_run(run.id, 1)

    waiting = _wait_state(run, RunState.RETRY_WAIT, worker=worker)

    assert "timed out after 1s" in waiting.last_error
    assert waiting.attempts.get().outcome == AttemptOutcome.TIMED_OUT
