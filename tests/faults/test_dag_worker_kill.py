"""A worker SIGKILLed between a parent's success and its child's start: the child still runs,
once (nothing lost, one run per firing; docs/architecture.md, Invariants)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime

import pytest
import redis
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.notifications import ChangeFeed
from jobs.models import JobRun, RunAttempt
from jobs.services.jobs import job_trigger_now
from jobs.states import RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.beat_nodes import make_engine
from tests.support.dags import dag_jobs, the_run
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUEUE = "test-dag-kill"


def _now() -> datetime:
    return SystemClock().now()


@pytest.fixture
def workers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[CeleryWorker, CeleryWorker]]:
    log_dir = tmp_path_factory.mktemp("dag-kill")
    env = worker_env(allowlist=[])
    doomed = CeleryWorker(queues=[QUEUE], env=env, log_path=log_dir / "doomed.log",
                          concurrency=1, module="tests.support.dag_kill_celery")  # fmt: skip
    healthy = CeleryWorker(queues=[QUEUE], env=env, log_path=log_dir / "healthy.log",
                           concurrency=1)  # fmt: skip
    yield doomed, healthy
    doomed.stop()
    healthy.stop()


def test_worker_killed_right_after_the_parents_success_commit_still_runs_the_child_once(
    workers: tuple[CeleryWorker, CeleryWorker],
) -> None:
    doomed, healthy = workers
    jobs = dag_jobs([("a", "b")], now=_now(), target_name="tests.echo", queue=QUEUE)
    engine = make_engine(SystemClock())
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    stop = threading.Event()

    def run_engine() -> None:
        try:
            engine.run(stop)
        finally:
            connection.close()

    thread = threading.Thread(target=run_engine, name="engine", daemon=True)
    thread.start()
    try:
        doomed.start()
        t = job_trigger_now(job_id=jobs["a"].id, now=_now()).scheduled_for
        process = doomed.process
        assert process is not None
        wait_until(lambda: process.poll() is not None, timeout_s=30,
                   what="the worker to kill itself after the parent's outcome")  # fmt: skip
        assert process.returncode == -9, doomed.log_tail()
        # Committed with the parent's success, before any wake-up or ack: nothing ran it yet.
        assert the_run(jobs["a"], t).state == RunState.SUCCEEDED
        child = the_run(jobs["b"], t)
        assert child.state in (RunState.PENDING, RunState.QUEUED)
        assert not RunAttempt.objects.filter(run_id=child.id).exists()

        healthy.start()
        wait_until(lambda: the_run(jobs["b"], t).state == RunState.SUCCEEDED, timeout_s=30,
                   what="the child to run on the healthy worker")  # fmt: skip
    finally:
        stop.set()
        thread.join(timeout=30)
    child = the_run(jobs["b"], t)
    assert child.attempt == 1
    assert RunAttempt.objects.filter(run_id=child.id).count() == 1
    assert JobRun.objects.filter(job=jobs["b"]).count() == 1
