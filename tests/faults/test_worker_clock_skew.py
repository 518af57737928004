"""A worker whose wall clock is a minute off, against a real beat node that reaps leases and
fires retries on the database's clock: its healthy runs are not reaped, its leases are as
long as configured, and its retries are due when the backoff says, measured on the database's
clock (one clock, docs/architecture.md, Invariants)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from jobs.models import Job, JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the tests.* callables)
from tests.support.beat_nodes import BeatNode
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

RUN_LEASE_S = 5.0
HEARTBEAT_S = 0.5
RETRY_DELAY_S = 8
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_RUN_LEASE_S": str(RUN_LEASE_S),
    "SCHEDULER_HEARTBEAT_S": str(HEARTBEAT_S),
}


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


# One node and worker per test, stopped before the test's tables are flushed: a beat node
# that ticks (partition rows locked, then jobs read) while the flush truncates every table
# can deadlock with it.
@pytest.fixture(params=[-60, 60], ids=["behind", "ahead"])
def skewed_worker(
    request: pytest.FixtureRequest,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    """A beat node on the right clock and a worker whose wall clock is off by the param."""
    tmp_path = tmp_path_factory.mktemp("skew")
    with django_db_blocker.unblock():
        env = {**worker_env(allowlist=[]), **FAST}
    node = BeatNode("clock", tmp_path, FAST)
    env["SCHEDULER_TEST_WALL_CLOCK_OFFSET_S"] = str(request.param)
    worker = CeleryWorker(
        ["scheduler"], env, tmp_path / "worker.log", module="tests.support.skewed_celery"
    )
    try:
        worker.start()
        node.start()
        yield worker
    finally:
        worker.stop()
        node.stop()


def _once(at: datetime, **fields: object) -> Job:
    return job_factory(tenant_factory(now=at), now=at, run_at=at + timedelta(seconds=3), **fields)


def _run_of(job: Job, worker: CeleryWorker) -> JobRun:
    try:
        wait_until(lambda: JobRun.objects.filter(job=job).exists(), timeout_s=30, what="a run")
    except AssertionError:
        raise AssertionError(worker.log_tail()) from None
    return JobRun.objects.get(job=job)


@pytest.mark.timeout(150)
def test_skewed_worker_keeps_its_leases_and_retries_on_the_database_clock(
    skewed_worker: CeleryWorker,
) -> None:
    """Both checks against one node and worker per direction (the worker runs two at once): a
    run that lasts past its lease, and a failing run whose retry the beat node queues."""
    now = _db_now()
    # Runs past its lease, so only heartbeats on the database's clock keep it alive.
    long_run = _once(now, target_name="tests.nap", payload={"seconds": 2.5 * RUN_LEASE_S})
    failing = _once(
        now,
        target_name="tests.always_fails",
        max_attempts=2,
        retry_base_delay=timedelta(seconds=RETRY_DELAY_S),
        retry_max_delay=timedelta(seconds=RETRY_DELAY_S),
        retry_jitter=False,
    )
    run = _run_of(long_run, skewed_worker)
    retried = _run_of(failing, skewed_worker)

    # While the long run runs, the lease the worker sets is always ahead of the database's
    # clock and never longer than the configured lease (plus the heartbeat it was set at, plus
    # slack). Meanwhile the failing run's first attempt fails and its retry is queued.
    leases: list[float] = []
    failed_by: list[datetime] = []

    def settled() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, EXTRACT(EPOCH FROM lease_until - clock_timestamp())"
                "  FROM jobs_jobrun WHERE id = %s",
                [run.id],
            )
            row = cursor.fetchone()
        assert row is not None
        if row[0] == RunState.RUNNING and row[1] is not None:
            leases.append(float(row[1]))
        if not failed_by and (
            RunAttempt.objects.filter(run=retried, attempt=1).exclude(outcome="").exists()
        ):
            failed_by.append(_db_now())
        long_done = row[0] in (RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED)
        return bool(long_done and RunAttempt.objects.filter(run=retried, attempt=2).exists())

    try:
        wait_until(settled, timeout_s=90, what="the long run to finish and the retry to start")
    except AssertionError:
        raise AssertionError(skewed_worker.log_tail()) from None

    done = JobRun.objects.get(id=run.id)
    attempts = list(RunAttempt.objects.filter(run=run).order_by("attempt"))
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, AttemptOutcome.SUCCEEDED)], (
        done.last_error
    )
    assert done.state == RunState.SUCCEEDED
    assert len(leases) >= 10
    assert min(leases) > 0, leases
    assert max(leases) <= RUN_LEASE_S + HEARTBEAT_S + 1, leases

    # The failed first attempt's retry is queued (on the beat node's database clock) no sooner
    # than the backoff after the firing, and not much later than the backoff after it failed.
    assert failed_by
    second = RunAttempt.objects.get(run=retried, attempt=2)
    fired_at = failing.run_at
    assert fired_at is not None
    delay = timedelta(seconds=RETRY_DELAY_S)
    assert second.queued_at is not None
    assert second.queued_at >= fired_at + delay, (second.queued_at, fired_at)
    assert second.queued_at <= failed_by[0] + delay + timedelta(seconds=2), (
        second.queued_at,
        failed_by,
    )
