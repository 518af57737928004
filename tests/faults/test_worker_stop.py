"""A stopping worker leaves no attempt ``running``: an attempt that finishes within the soft
shutdown timeout records its outcome, and one that cannot is ended by the worker itself and
handed back (attempt ``lost``, run ``retry_wait`` due at once), in a warm shutdown (SIGTERM) and
in a cold one (SIGTERM with REMAP_SIGTERM=SIGQUIT); the engine's timers then queue its next
attempt, which has the effect once (docs/execution.md, "Stopping a worker").
"""

from __future__ import annotations

import signal
import subprocess
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support import stop_targets, targets  # noqa: F401  (registers the targets here too)
from tests.support.beat_nodes import make_engine
from tests.support.factories import job_factory, run_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, publish_run, wait_for_state, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

QUEUE = "test-stop"
# The second worker's own queue, so it can start with the first without taking its runs.
COLD_QUEUE = "test-stop-cold"
SOFT_TIMEOUT_S = 2
ENV = {
    "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": str(SOFT_TIMEOUT_S),
    "SCHEDULER_CANCEL_GRACE_S": "0.5",
    "SCHEDULER_CLIENT_MODULES": (
        "scheduler_project.demo,tests.support.targets,tests.support.stop_targets"
    ),
}


def _now() -> datetime:
    return SystemClock().now()


def _started(queue: str, target: str, **payload: Any) -> JobRun:
    tenant = tenant_factory(now=_now())
    # Hourly, so the engine driven below has no firing of its own to claim.
    job: Job = job_factory(
        tenant,
        now=_now(),
        interval=timedelta(hours=1),
        queue=queue,
        target_name=target,
        payload=payload,
        max_attempts=3,
    )
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    publish_run(run.id, 1, queue)
    return run


def _stopped(worker: CeleryWorker) -> int:
    """SIGTERM to the main process only, as a service manager sends it; its exit code."""
    assert worker.process is not None
    worker.process.send_signal(signal.SIGTERM)
    try:
        return worker.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker did not stop: {worker.log_tail()}") from None


def _assert_handed_back(run: JobRun, worker: CeleryWorker) -> None:
    current = JobRun.objects.get(id=run.id)
    assert current.state == RunState.RETRY_WAIT, (current.state, worker.log_tail())
    # The same attempt number: the timers queue attempt 2 next, a new fence.
    assert current.attempt == 1
    assert current.lease_until is None
    assert current.due_at is not None
    assert current.due_at <= _now()
    assert "interrupted" in current.last_error
    (attempt,) = RunAttempt.objects.filter(run_id=run.id)
    assert attempt.outcome == AttemptOutcome.LOST
    assert attempt.finished_at is not None


def _timers_queue(run: JobRun) -> None:
    """The engine's timers queue and publish the handed-back run's next attempt."""
    engine = make_engine(SystemClock(), node_id="stop-test")

    def queued() -> bool:
        engine.tick()
        return JobRun.objects.get(id=run.id).state != RunState.RETRY_WAIT

    wait_until(queued, what="the timers to queue the next attempt")
    engine.shutdown()


@pytest.mark.timeout(120)
def test_a_stopping_worker_finishes_what_it_can_and_hands_back_the_rest(tmp_path: Path) -> None:
    targets.ensure_side_effects_table()
    release = tmp_path / "release"
    env = {**worker_env(allowlist=[]), **ENV}
    warm = CeleryWorker([QUEUE], env, tmp_path / "warm.log", concurrency=2)
    cold = CeleryWorker(
        [COLD_QUEUE], {**env, "REMAP_SIGTERM": "SIGQUIT"}, tmp_path / "cold.log", concurrency=1
    )
    try:
        starting = threading.Thread(target=cold.start)
        starting.start()
        warm.start()
        starting.join()
        # Warm shutdown: one attempt finishes within the soft timeout, one cannot.
        long = _started(QUEUE, "tests.stop.long_first_attempt")
        short = _started(QUEUE, "tests.stop.until_released", release=str(release))
        wait_for_state(long, RunState.RUNNING, worker=warm)
        wait_for_state(short, RunState.RUNNING, worker=warm)
        assert warm.process is not None
        warm.process.send_signal(signal.SIGTERM)
        release.touch()
        wait_for_state(short, RunState.SUCCEEDED, worker=warm)
        assert warm.process.wait(timeout=30) == 0, warm.log_tail()
        _assert_handed_back(long, warm)

        # The next attempt of the handed-back run, on the other worker (its job moved to that
        # worker's queue); then a cold shutdown of that worker cuts a third run short.
        Job.objects.filter(id=long.job_id).update(queue=COLD_QUEUE)
        _timers_queue(long)
        wait_for_state(long, RunState.SUCCEEDED, worker=cold)
        third = _started(COLD_QUEUE, "tests.stop.long_first_attempt")
        wait_for_state(third, RunState.RUNNING, worker=cold)
        _stopped(cold)
        _assert_handed_back(third, cold)
    finally:
        warm.stop()
        cold.stop()

    assert not JobRun.objects.filter(state=RunState.RUNNING).exists()
    assert not RunAttempt.objects.filter(outcome="").exists()
    outcomes = list(RunAttempt.objects.filter(run_id=long.id).values_list("attempt", "outcome"))
    assert outcomes == [(1, AttemptOutcome.LOST), (2, AttemptOutcome.SUCCEEDED)]
    # Each effect once: the interrupted attempts had none, the rest one each.
    effects = sorted((key, attempt) for key, attempt, _note in targets.side_effects())
    assert effects == sorted([(long.dedup_key, 2), (short.dedup_key, 1)])
