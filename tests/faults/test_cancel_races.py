"""Cancels, pauses and patches racing workers' outcomes and the engine's timers, on real
PostgreSQL with a connection per thread: one lock order and cancel is final
(docs/architecture.md, Invariants).

Each round starts a job with running attempts and a run due to retry, then lets every running
attempt's outcome, the API's changes (pause or patch or a run cancel, then the job's cancel) and
the engine's timers go at once. Afterwards the reaper runs past every lease, and every run is
offered a redelivery of its attempt and a re-sent next attempt.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection
from psycopg import errors as pg_errors

from beat_engine.clock import SystemClock
from beat_engine.fencing import epoch_take
from beat_engine.timers import fire_timers
from jobs.models import Job, JobRun, RunAttempt
from jobs.services import runs
from jobs.services.job_intake import job_patch
from jobs.services.jobs import job_cancel, job_pause
from jobs.services.starts import StartOutcome, run_start
from jobs.states import TERMINAL_STATES, AttemptOutcome, RunState
from tests.support.factories import job_factory, run_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

ROUNDS = 100
RUNNING_PER_ROUND = 4
TIME_BUDGET_S = 240.0


def _now() -> datetime:
    return SystemClock().now()


def _deadlocks_so_far() -> int:
    """Deadlocks PostgreSQL detected in this database (flushed by the backends that ended)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _outcome(run_id: uuid.UUID, kind: str) -> Callable[[], Any]:
    now = _now()
    if kind == "succeed":
        return lambda: runs.run_succeed(run_id=run_id, attempt=1, now=now, result={"ok": 1})
    if kind == "retry":
        due = now - timedelta(seconds=1)
        return lambda: runs.run_retry(run_id=run_id, attempt=1, due_at=due, error="boom", now=now)
    if kind == "fail":
        return lambda: runs.run_fail(run_id=run_id, attempt=1, error="permanent", now=now)
    return lambda: runs.run_dead_letter(run_id=run_id, attempt=1, error="last", now=now)


def _api(job_id: uuid.UUID, run_ids: list[uuid.UUID], rng: random.Random) -> Callable[[], Any]:
    first = rng.choice(["pause", "patch", "cancel_run"])
    picked = rng.choice(run_ids)

    def changes() -> None:
        now = _now()
        if first == "pause":
            job_pause(job_id=job_id, now=now)
        elif first == "patch":
            job_patch(
                job_id=job_id,
                changes={"description": f"patched {now.isoformat()}"},
                status=None,
                expected_version=None,
                now=now,
            )
        else:
            runs.run_request_cancel(run_id=picked, now=now)
        job_cancel(job_id=job_id, now=_now())

    return changes


def _race(actions: list[Callable[[], Any]], errors: list[BaseException]) -> None:
    barrier = threading.Barrier(len(actions))

    def act(action: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            action()
        except BaseException as exc:  # noqa: BLE001 - every failure, a deadlock first, is reported
            errors.append(exc)
        finally:
            # Each thread has its own connection; close it so its statistics are flushed and the
            # test database can be dropped.
            connection.close()

    threads = [threading.Thread(target=act, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a racing thread is stuck"


def _round(
    job: Job, rng: random.Random, epochs: dict[int, int], errors: list[BaseException]
) -> None:
    now = _now()
    running = [
        run_factory(
            job, scheduled_for=now - timedelta(seconds=k + 1), state=RunState.RUNNING, attempt=1,
            started_at=now, lease_until=now + timedelta(minutes=1), due_at=None, worker="w",
        )
        for k in range(RUNNING_PER_ROUND)
    ]  # fmt: skip
    waiting = run_factory(
        job, scheduled_for=now - timedelta(minutes=1), state=RunState.RETRY_WAIT, attempt=1,
        due_at=now - timedelta(seconds=1), last_error="boom",
    )  # fmt: skip
    RunAttempt.objects.bulk_create(
        [RunAttempt(run=run, attempt=1, worker="w", started_at=now) for run in running]
        + [RunAttempt(run=waiting, attempt=1, worker="w", started_at=now, outcome="failed")]
    )
    kinds = ["succeed", "retry", "fail", "dead"]
    actions = [_outcome(run.id, rng.choice(kinds)) for run in running]
    actions.append(_api(job.id, [run.id for run in [*running, waiting]], rng))
    # The engine's timers: the run due to retry becomes attempt 2 unless the cancel came first.
    actions.append(lambda: fire_timers(epochs, now=_now(), limit=100))
    _race(actions, errors)


def _after_the_race(job: Job, epochs: dict[int, int]) -> dict[uuid.UUID, str]:
    """Every lease expired for the reaper, then every run offered its attempt again and the
    next one; returns each run's state."""
    fire_timers(epochs, now=_now() + timedelta(hours=1), limit=1000)
    for run in JobRun.objects.filter(job=job):
        for attempt in (run.attempt, run.attempt + 1):
            started = run_start(run_id=run.id, attempt=attempt, worker="late", now=_now())
            assert started.outcome != StartOutcome.STARTED, (run.id, run.state, attempt)
    fire_timers(epochs, now=_now() + timedelta(hours=2), limit=1000)
    return dict(JobRun.objects.filter(job=job).values_list("id", "state"))


@pytest.mark.timeout(600)
def test_cancels_pauses_and_patches_racing_outcomes_never_deadlock_nor_run_again(
    redis_client: redis.Redis,
) -> None:
    rng = random.Random(20261201)
    now = _now()
    epochs = {
        p: epoch_take(partition=p, node="race", now=now)
        for p in range(settings.SCHEDULER["PARTITIONS"])
    }
    tenant = tenant_factory()
    deadlocks_before = _deadlocks_so_far()
    errors: list[BaseException] = []
    started = time.monotonic()
    rounds = 0
    while rounds < ROUNDS and time.monotonic() - started < TIME_BUDGET_S:
        job = job_factory(tenant, now=_now(), interval=timedelta(hours=1), max_attempts=3)
        _round(job, rng, epochs, errors)
        assert not errors, [repr(e) for e in errors]
        states = _after_the_race(job, epochs)
        # Exactly one terminal state, which the later passes of the engine did not change.
        assert set(states.values()) <= {s.value for s in TERMINAL_STATES}, states
        assert _after_the_race(job, epochs) == states
        # No attempt after the cancel: only the attempts that had started before it.
        attempts = RunAttempt.objects.filter(run__job=job)
        assert sorted(attempts.values_list("attempt", flat=True)) == [1] * (RUNNING_PER_ROUND + 1)
        assert Job.objects.get(id=job.id).status == "cancelled"
        rounds += 1
    assert rounds >= 20, f"only {rounds} rounds within the time budget"
    deadlocks = [
        e
        for e in errors
        if isinstance(e, OperationalError) and isinstance(e.__cause__, pg_errors.DeadlockDetected)
    ]
    assert deadlocks == []
    # Also none that a retry hid: PostgreSQL counted none in this database (each racing backend
    # flushed its statistics when it ended).
    wait_until(lambda: _other_backends() == 0, what="the racing backends to end")
    assert _deadlocks_so_far() == deadlocks_before
    # Every outcome was applied or ended cancelled: no attempt is left without its outcome.
    assert not RunAttempt.objects.filter(run__job__tenant=tenant, outcome="").exists()
    lost = RunAttempt.objects.filter(run__job__tenant=tenant, outcome=AttemptOutcome.LOST)
    assert not lost.exists()
