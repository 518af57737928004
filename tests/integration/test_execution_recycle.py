"""A pool process holding too many abandoned target threads is replaced; no run is lost or
run twice on the way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, publish_run, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIMIT = 2
# A queue of its own: no other test's worker may take these messages.
QUEUE = "scheduler.recycle"
FOLLOWING = 3


def _now() -> datetime:
    return SystemClock().now()


@pytest.fixture
def one_process_worker(tmp_path: Path) -> Iterator[CeleryWorker]:
    env = {**worker_env(allowlist=[]), "SCHEDULER_MAX_ABANDONED_TARGETS": str(LIMIT)}
    # One pool process, so the order of the messages is the order the process serves them.
    worker = CeleryWorker([QUEUE], env, tmp_path / "worker.log", concurrency=1)
    worker.start()
    yield worker
    worker.stop()


def _queued(job: Job, offset_s: int) -> JobRun:
    now = _now()
    return run_factory(
        job,
        scheduled_for=now + timedelta(seconds=offset_s),
        state=RunState.QUEUED,
        attempt=1,
        queued_at=now,
        due_at=None,
    )


def _pid(run: JobRun) -> int:
    # RunAttempt.worker is "host:pid" of the pool process that ran the attempt.
    return int(RunAttempt.objects.get(run=run).worker.rsplit(":", 1)[1])


@pytest.mark.timeout(180)
def test_a_process_holding_too_many_abandoned_targets_is_replaced(
    one_process_worker: CeleryWorker,
) -> None:
    now = _now()
    # Ignores cancellation: each attempt times out after 1 s and leaves its thread behind.
    stubborn = job_factory(
        target_name="tests.stubborn",
        payload={"sleep_s": 60},
        timeout=timedelta(seconds=1),
        max_attempts=1,
        now=now,
    )
    echo = job_factory(target_name="tests.echo", now=now)
    abandoning = [_queued(stubborn, k) for k in range(LIMIT)]
    following = [_queued(echo, k) for k in range(FOLLOWING)]
    for run in [*abandoning, *following]:
        publish_run(run.id, 1, QUEUE)

    ids = [run.id for run in [*abandoning, *following]]
    terminal = [RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED, RunState.CANCELLED]
    try:
        wait_until(
            lambda: JobRun.objects.filter(id__in=ids, state__in=terminal).count() == len(ids),
            timeout_s=90,
            what="every run to finish",
        )
    except AssertionError:
        raise AssertionError(one_process_worker.log_tail()) from None

    for run in JobRun.objects.filter(id__in=ids):
        # One attempt each: nothing was redelivered into a second execution, nothing lost.
        assert run.attempt == 1
        assert RunAttempt.objects.filter(run=run).count() == 1
    for run in abandoning:
        done = JobRun.objects.get(id=run.id)
        assert done.state == RunState.DEAD, done.last_error
        assert RunAttempt.objects.get(run=run).outcome == AttemptOutcome.TIMED_OUT
    for run in following:
        assert JobRun.objects.get(id=run.id).state == RunState.SUCCEEDED

    retired = {_pid(run) for run in abandoning}
    assert len(retired) == 1, retired
    (old_pid,) = retired
    successors = {_pid(run) for run in following}
    # The runs after the limit were served by a new process, and the old one (with its
    # abandoned threads) is gone.
    assert old_pid not in successors, (old_pid, successors)
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)
    log = one_process_worker.log_tail(200_000)
    assert "execution.worker.retiring" in log
    # Retired cleanly: the pool did not see a lost worker, so no message was requeued.
    assert "WorkerLostError" not in log, log[-4000:]
    assert "exited with" not in log, log[-4000:]
