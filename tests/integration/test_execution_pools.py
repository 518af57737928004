"""The executor under Celery's threads and gevent pools, on real workers: several attempts run
at once in one process, and success, timeout, cancel (cooperative, ignored, an HTTP call cut
off) and the warm shutdown's hand-back work as under prefork (docs/execution.md, "Worker
pools"). The prefork pool is the rest of the suite's worker.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun, RunAttempt
from jobs.services.runs import run_request_cancel
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    TEST_QUEUE,
    CeleryWorker,
    HttpTarget,
    allowed_http_target_fixture,  # noqa: F401  (fixture)
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    wait_for_state,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

POOLS = ("threads", "gevent")
CONCURRENCY = {"threads": 4, "gevent": 20}


def _now() -> datetime:
    return SystemClock().now()


def _env(http_target: HttpTarget, **extra: str) -> dict[str, str]:
    """The suite's worker environment with the local target allowed, and ``extra``."""
    return {**worker_env(allowlist=[f"127.0.0.1:{http_target.port}"]), **extra}


def _start(pool: str, env: dict[str, str], log: Path, queue: str = TEST_QUEUE) -> CeleryWorker:
    worker = CeleryWorker(
        queues=[queue], env=env, log_path=log, concurrency=CONCURRENCY[pool], pool=pool
    )
    worker.start()
    return worker


@pytest.fixture(scope="module", params=POOLS, name="pooled")
def pooled_fixture(
    request: pytest.FixtureRequest,
    django_db_setup: None,
    django_db_blocker: Any,
    http_target: HttpTarget,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    with django_db_blocker.unblock():
        env = _env(http_target)
    log = tmp_path_factory.mktemp(f"worker-{request.param}") / "worker.log"
    worker = _start(request.param, env, log)
    yield worker
    worker.stop()


def _queued(job: Job) -> JobRun:
    now = _now()
    return run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )


def _published(**fields: Any) -> JobRun:
    job = job_factory(**{"target_name": "tests.block", "now": _now(), **fields})
    run = _queued(job)
    publish_run(run.id, 1, job.queue)
    return run


def test_a_callable_succeeds(pooled: CeleryWorker) -> None:
    run = _published(target_name="tests.echo", payload={"n": 7})

    done = wait_for_state(run, RunState.SUCCEEDED, worker=pooled)

    assert done.attempts.get().outcome == AttemptOutcome.SUCCEEDED


def _client_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        return int(cursor.fetchone()[0])


def test_the_workers_sessions_stay_within_its_concurrency(pooled: CeleryWorker) -> None:
    # Under gevent every task runs on a new greenlet with a connection of its own, borrowed
    # from the process's pool: one not given back at the task's end starves the pool, and one
    # opened per task and left open piles up faster than it is collected (jobs/worker_pools.py).
    # Beside the pool's: the test's own session and the worker's main thread's.
    bound = _client_sessions() + CONCURRENCY[pooled.pool] + 1
    runs = [_published(target_name="tests.echo", payload={"n": n}) for n in range(200)]
    peak = 0

    def done() -> bool:
        nonlocal peak
        peak = max(peak, _client_sessions())
        return not JobRun.objects.filter(
            id__in=[run.id for run in runs], state__in=[RunState.QUEUED, RunState.RUNNING]
        ).exists()

    wait_until(done, what="the runs to finish")

    assert (
        JobRun.objects.filter(id__in=[r.id for r in runs], state=RunState.SUCCEEDED).count() == 200
    )
    assert peak <= bound, (peak, bound)


def test_attempts_run_at_once_in_one_process_and_cancel_each(pooled: CeleryWorker) -> None:
    runs = [_published(payload={"max_s": 60}) for _ in range(3)]
    running = [wait_for_state(run, RunState.RUNNING, worker=pooled) for run in runs]

    # One worker process (host:pid) runs all three at the same time: the pool's concurrency
    # is in the process, not in processes forked beside it.
    assert {run.worker for run in running} == {running[0].worker}
    assert running[0].worker.endswith(f":{pooled.process.pid}")  # type: ignore[union-attr]
    for run in runs:
        assert run_request_cancel(run_id=run.id, now=_now())
    for run in runs:
        done = wait_for_state(run, RunState.CANCELLED, worker=pooled)
        assert done.attempts.get().outcome == AttemptOutcome.CANCELLED


def test_timeout_ends_the_attempt(pooled: CeleryWorker) -> None:
    run = _published(payload={"max_s": 60}, timeout=timedelta(seconds=1), max_attempts=2)

    waiting = wait_for_state(run, RunState.RETRY_WAIT, worker=pooled)

    assert "timed out after 1s" in waiting.last_error
    assert waiting.attempts.get().outcome == AttemptOutcome.TIMED_OUT


def test_cancel_abandons_a_callable_that_ignores_it(pooled: CeleryWorker) -> None:
    run = _published(target_name="tests.stubborn", payload={"sleep_s": 20})
    wait_for_state(run, RunState.RUNNING, worker=pooled)

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, worker=pooled)
    assert done.attempts.get().outcome == AttemptOutcome.CANCELLED


def test_cancel_aborts_a_running_http_call(
    pooled: CeleryWorker, allowed_http_target: HttpTarget
) -> None:
    allowed_http_target.entered.clear()
    allowed_http_target.release.clear()
    run = _published(
        target_kind="http", target_name="", target_url=allowed_http_target.url("/slow")
    )
    wait_until(allowed_http_target.entered.is_set, what="the request to reach the server")

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, worker=pooled)
    allowed_http_target.release.set()
    assert done.attempts.get().outcome == AttemptOutcome.CANCELLED


@pytest.mark.parametrize("pool", POOLS)
def test_a_warm_shutdown_hands_back_what_outlasts_its_timeout(
    pool: str, http_target: HttpTarget, tmp_path: Path
) -> None:
    env = _env(http_target, CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT="1")
    queue = f"test-pool-stop-{pool}"
    worker = _start(pool, env, tmp_path / "worker.log", queue)
    try:
        run = _published(payload={"max_s": 60}, queue=queue, max_attempts=3)
        wait_for_state(run, RunState.RUNNING, worker=worker)
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
        try:
            worker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not stop: {worker.log_tail()}") from None
    finally:
        worker.stop()

    current = JobRun.objects.get(id=run.id)
    assert current.state == RunState.RETRY_WAIT, (current.state, worker.log_tail())
    assert current.attempt == 1
    assert current.due_at is not None
    assert current.due_at <= _now()
    (attempt,) = RunAttempt.objects.filter(run_id=run.id)
    assert attempt.outcome == AttemptOutcome.LOST


def test_gevent_attempts_share_a_pool_smaller_than_their_number(
    http_target: HttpTarget, tmp_path: Path
) -> None:
    # Six attempts, two connections: each borrows one for its start, each heartbeat and its
    # outcome, and gives it back in between (jobs/worker_pools.py).
    env = _env(http_target, SCHEDULER_GEVENT_DB_POOL_MAX="2")
    queue = "test-pool-share"
    worker = _start("gevent", env, tmp_path / "worker.log", queue)
    try:
        runs = [_published(payload={"max_s": 60}, queue=queue) for _ in range(6)]
        for run in runs:
            wait_for_state(run, RunState.RUNNING, worker=worker)

        def all_beating() -> bool:
            # Heartbeats every 0.2 s (worker_env): each attempt's beat is recent, not stuck
            # behind another's connection.
            beats = JobRun.objects.filter(id__in=[r.id for r in runs]).values_list(
                "started_at", "heartbeat_at"
            )
            return all(beat - started > timedelta(seconds=1) for started, beat in beats)

        wait_until(all_beating, timeout_s=20, what="every attempt to keep heartbeating")
        for run in runs:
            assert run_request_cancel(run_id=run.id, now=_now())
        for run in runs:
            done = wait_for_state(run, RunState.CANCELLED, worker=worker)
            assert done.attempts.get().outcome == AttemptOutcome.CANCELLED
    finally:
        worker.stop()
