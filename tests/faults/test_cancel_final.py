"""Cancel is final (docs/architecture.md, Invariants) on a real worker: a cancelled run, or a run
of a cancelled job, never starts another attempt, whether its worker is SIGKILLed before it
confirms the cancel (lease reaper) or its attempt fails first (retry timer), and whatever
messages for it arrive afterwards (a redelivery of the attempt, a re-sent next attempt).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun, RunAttempt
from jobs.services import runs
from jobs.services.jobs import job_cancel
from jobs.services.runs import run_request_cancel
from jobs.states import AttemptOutcome, RunState
from tests.support import cancel_targets, targets  # noqa: F401  (registers the targets here too)
from tests.support.beat_nodes import make_engine
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, publish_run, wait_for_state, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

QUEUE = "test-cancel"
# Heartbeats rarer than the targets' work, so an attempt is cancelled, killed or failed before
# its supervisor notices the cancel; a short lease, so the reaper may act within the test.
ENV = {
    "SCHEDULER_HEARTBEAT_S": "5",
    "SCHEDULER_RUN_LEASE_S": "3",
    "SCHEDULER_CANCEL_GRACE_S": "0.5",
    "SCHEDULER_CLIENT_MODULES": (
        "scheduler_project.demo,tests.support.targets,tests.support.cancel_targets"
    ),
}


def _now() -> datetime:
    return SystemClock().now()


@pytest.fixture
def cancel_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(
        queues=[QUEUE],
        env={**worker_env(allowlist=[]), **ENV},
        log_path=tmp_path_factory.mktemp("cancel") / "worker.log",
        concurrency=1,
    )
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def rare_beat_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    """A worker whose first heartbeat would come only after the test has given up."""
    env = {**ENV, "SCHEDULER_HEARTBEAT_S": "600", "SCHEDULER_RUN_LEASE_S": "1200"}
    worker = CeleryWorker(
        queues=[QUEUE],
        env={**worker_env(allowlist=[]), **env},
        log_path=tmp_path_factory.mktemp("rare-beat") / "worker.log",
        concurrency=1,
    )
    worker.start()
    yield worker
    worker.stop()


def _job(**overrides: Any) -> Job:
    # Hourly, so the engine driven below has no firing of its own to claim.
    fields: dict[str, Any] = {"interval": timedelta(hours=1), "queue": QUEUE, "now": _now()}
    fields.update(overrides)
    return job_factory(**fields)


def _running(job: Job, worker: CeleryWorker) -> JobRun:
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    publish_run(run.id, 1, QUEUE)
    return wait_for_state(run, RunState.RUNNING, worker=worker)


def _engine_pass(run: JobRun) -> None:
    """The engine's timers and reaper act on the run's partition (once its lease is held)."""
    engine = make_engine(SystemClock())

    def holds_partition() -> bool:
        engine.tick()
        return run.partition in engine.leases

    wait_until(holds_partition, what="the engine to hold the run's partition")
    engine.tick()


def _after_lease_expired(run: JobRun) -> None:
    """The engine's timers and reaper, once the attempt's lease has run out."""
    lease_until = JobRun.objects.get(id=run.id).lease_until
    assert lease_until is not None
    wait_until(lambda: _now() > lease_until + timedelta(milliseconds=200), what="lease expiry")
    _engine_pass(run)


def _messages_find_nothing_to_start(run: JobRun, worker: CeleryWorker) -> None:
    """A redelivery of attempt 1 and a re-sent attempt 2 reach the worker and are dropped."""
    dropped = worker.metric("scheduler_duplicate_deliveries_total")
    publish_run(run.id, 1, QUEUE)
    publish_run(run.id, 2, QUEUE)
    try:
        wait_until(
            lambda: worker.metric("scheduler_duplicate_deliveries_total") >= dropped + 2,
            what="both messages to be dropped",
        )
    except AssertionError:
        raise AssertionError(worker.log_tail()) from None


def _attempts(run: JobRun) -> list[tuple[int, str]]:
    rows = RunAttempt.objects.filter(run_id=run.id).order_by("attempt")
    return list(rows.values_list("attempt", "outcome"))


@pytest.mark.timeout(120)
def test_run_cancelled_while_running_then_its_worker_killed_never_runs_again(
    redis_client: redis.Redis, cancel_worker: CeleryWorker
) -> None:
    run = _running(_job(target_name="tests.ignore_cancel", max_attempts=3), cancel_worker)

    assert run_request_cancel(run_id=run.id, now=_now())
    cancel_worker.kill()
    _after_lease_expired(run)
    cancel_worker.start()
    _messages_find_nothing_to_start(run, cancel_worker)

    done = JobRun.objects.get(id=run.id)
    assert (done.state, done.attempt, done.lease_until) == (RunState.CANCELLED, 1, None)
    assert done.finished_at is not None
    assert _attempts(run) == [(1, AttemptOutcome.LOST)]


@pytest.mark.timeout(120)
def test_run_cancelled_while_running_whose_attempt_then_fails_is_not_retried(
    redis_client: redis.Redis, cancel_worker: CeleryWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The announcement to the worker is lost (Redis is a hint): the attempt fails on its own
    # before its next heartbeat would read the flag.
    monkeypatch.setattr(runs, "notify_runs_cancelled", lambda run_ids: None, raising=False)
    job = _job(
        target_name="tests.fail_later",
        payload={"seconds": 1.5},
        max_attempts=3,
        retry_base_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
    )
    run = _running(job, cancel_worker)

    # Acknowledged while the attempt runs.
    assert run_request_cancel(run_id=run.id, now=_now())
    done = wait_for_state(
        run, RunState.CANCELLED, RunState.RETRY_WAIT, RunState.QUEUED, worker=cancel_worker
    )
    wait_until(lambda: _now() > (done.due_at or done.finished_at or _now()), what="due time")
    _engine_pass(run)
    _messages_find_nothing_to_start(run, cancel_worker)

    done = JobRun.objects.get(id=run.id)
    assert (done.state, done.attempt, done.due_at) == (RunState.CANCELLED, 1, None)
    assert "failed after working" in done.last_error
    assert _attempts(run) == [(1, AttemptOutcome.FAILED)]


@pytest.mark.timeout(120)
def test_run_in_retry_wait_cancelled_is_never_queued_again(
    redis_client: redis.Redis, cancel_worker: CeleryWorker
) -> None:
    job = _job(
        target_name="tests.fail_later",
        payload={"seconds": 0},
        max_attempts=3,
        retry_base_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=1),
    )
    now = _now()
    queued = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    publish_run(queued.id, 1, QUEUE)
    waiting = wait_for_state(queued, RunState.RETRY_WAIT, worker=cancel_worker)

    assert run_request_cancel(run_id=queued.id, now=_now())
    due_at = waiting.due_at
    assert due_at is not None
    wait_until(lambda: _now() > due_at, what="the retry's due time")
    _engine_pass(queued)
    _messages_find_nothing_to_start(queued, cancel_worker)

    done = JobRun.objects.get(id=queued.id)
    assert (done.state, done.attempt, done.due_at) == (RunState.CANCELLED, 1, None)
    assert _attempts(queued) == [(1, AttemptOutcome.FAILED)]


@pytest.mark.timeout(120)
def test_job_deleted_while_its_run_is_mid_flight_and_the_worker_dies_never_runs_again(
    redis_client: redis.Redis, cancel_worker: CeleryWorker
) -> None:
    job = _job(target_name="tests.ignore_cancel", max_attempts=3)
    run = _running(job, cancel_worker)

    job_cancel(job_id=job.id, now=_now())
    cancel_worker.kill()
    _after_lease_expired(run)
    cancel_worker.start()
    _messages_find_nothing_to_start(run, cancel_worker)

    done = JobRun.objects.get(id=run.id)
    assert (done.state, done.attempt) == (RunState.CANCELLED, 1)
    assert _attempts(run) == [(1, AttemptOutcome.LOST)]
    assert JobRun.objects.filter(job=job).count() == 1


@pytest.mark.timeout(120)
def test_cancel_reaches_a_running_attempt_at_once_not_only_at_its_next_heartbeat(
    redis_client: redis.Redis, rare_beat_worker: CeleryWorker
) -> None:
    # A cooperative target that would run 90 s; no heartbeat is due for 600 s.
    run = _running(_job(target_name="tests.block", payload={"max_s": 90}), rare_beat_worker)

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, RunState.SUCCEEDED, worker=rare_beat_worker)
    assert done.state == RunState.CANCELLED
    assert _attempts(run) == [(1, AttemptOutcome.CANCELLED)]
