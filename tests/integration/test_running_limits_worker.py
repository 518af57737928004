"""Running limits with real worker processes: a tenant limited to 2 runs never has more running
whatever the workers' free processes, its waiting runs start oldest first as slots free, and a
slot held by a worker process killed with SIGKILL comes back when the run's lease expires."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db import connections as db_connections

from beat_engine.fencing import epoch_take
from beat_engine.timers import fire_timers
from jobs.models import Job, JobRun, RunAttempt, Tenant
from jobs.states import AttemptOutcome, RunState
from tests.support import targets
from tests.support.factories import job_factory, run_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    TEST_QUEUE,
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now: datetime = cursor.fetchone()[0]
    return now


@pytest.fixture(scope="module", name="wide_worker")
def wide_worker_fixture(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    """Four processes: twice the limit, so only the limit can keep runs from starting."""
    with django_db_blocker.unblock():
        env = worker_env(allowlist=[])
    worker = CeleryWorker(
        queues=[TEST_QUEUE], env=env, concurrency=4,
        log_path=tmp_path_factory.mktemp("wide") / "worker.log",
    )  # fmt: skip
    worker.start()
    yield worker
    worker.stop()


class EngineStandIn:
    """The beat engine's part, in a thread: its timers and reaper (beat_engine/timers.py) on the
    database's clock, every 50 ms, and a push of each run they queue; also samples how many runs
    of the tenant are running, as the database counts them."""

    def __init__(self, jobs: list[Job]) -> None:
        self.partitions = sorted({job.partition for job in jobs})
        self.tenant_ids = sorted({job.tenant_id for job in jobs})
        self.most_running = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-stand-in", daemon=True)
        self._error: Exception | None = None

    def __enter__(self) -> EngineStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        try:
            now = _db_now()
            epochs = {p: epoch_take(partition=p, node="stand-in", now=now) for p in self.partitions}
            while not self._stop.is_set():
                for queued in fire_timers(epochs, now=_db_now(), limit=100).queued:
                    publish_run(queued.run_id, queued.attempt)
                running = JobRun.objects.filter(
                    tenant_id__in=self.tenant_ids, state=RunState.RUNNING
                ).count()
                self.most_running = max(self.most_running, running)
                self.samples += 1
                self._stop.wait(0.05)
        except Exception as exc:  # noqa: BLE001  (reported by __exit__ in the test's thread)
            self._error = exc
        finally:
            db_connections.close_all()


def _queued(job: Job, scheduled_for: datetime) -> JobRun:
    return run_factory(
        job, scheduled_for=scheduled_for, state=RunState.QUEUED, attempt=1,
        queued_at=_db_now(), due_at=None,
    )  # fmt: skip


def _limited_tenant(limit: int) -> Tenant:
    tenant = tenant_factory()
    Tenant.objects.filter(id=tenant.id).update(max_running_runs=limit)
    return tenant


def _state(run_id: uuid.UUID) -> str:
    return str(JobRun.objects.values_list("state", flat=True).get(id=run_id))


def _parked(run_id: uuid.UUID) -> bool:
    """Waiting and not released: its due time is the backstop's, well in the future."""
    run = JobRun.objects.get(id=run_id)
    return (
        run.state == RunState.RETRY_WAIT
        and run.due_at is not None
        and (run.due_at > _db_now() + timedelta(seconds=60))
    )


def test_limit_of_two_runs_six_due_runs_two_at_a_time_oldest_first(
    wide_worker: CeleryWorker,
) -> None:
    targets.ensure_side_effects_table()
    job = job_factory(_limited_tenant(2), target_name="tests.gate")
    base = _db_now().replace(microsecond=0) - timedelta(minutes=1)
    runs = [_queued(job, base + timedelta(seconds=i)) for i in range(6)]

    with EngineStandIn([job]) as engine:
        # Delivered in firing order, each once the previous one has started or parked, so which
        # two run first is not left to the race of four free processes.
        for index, run in enumerate(runs):
            publish_run(run.id, 1)
            wait_until(
                lambda run=run: _state(run.id) in (RunState.RUNNING, RunState.RETRY_WAIT),
                what=f"run {index} to start or wait",
            )
        assert [_state(r.id) for r in runs] == ["running"] * 2 + ["retry_wait"] * 4
        # Each run ends when the test opens its gate, oldest running first; each end frees one
        # slot, which goes to the oldest waiting run and to no other.
        for index, run in enumerate(runs):
            targets.open_gate(run.id)
            wait_until(lambda run=run: _state(run.id) == RunState.SUCCEEDED, what=f"run {index}")
            if index + 2 < len(runs):
                nxt = runs[index + 2]
                wait_until(lambda nxt=nxt: _state(nxt.id) == RunState.RUNNING, what="next start")
            assert all(_parked(later.id) for later in runs[index + 3 :])

    assert engine.samples > 10
    assert engine.most_running == 2
    attempts = list(RunAttempt.objects.filter(run__job=job).order_by("finished_at"))
    # Each ran once, as attempt 1: waiting spent no attempt.
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, AttemptOutcome.SUCCEEDED)] * 6
    # All six finished in the order of their firings.
    assert [a.run_id for a in attempts] == [r.id for r in runs]


def test_a_killed_workers_slot_returns_when_its_lease_expires(wide_worker: CeleryWorker) -> None:
    tenant = _limited_tenant(1)
    doomed_job = job_factory(tenant, target_name="tests.block_first_attempt", max_attempts=3)
    waiting_job = job_factory(tenant, target_name="tests.nap", payload={"seconds": 0.1})
    base = _db_now().replace(microsecond=0) - timedelta(minutes=1)
    doomed, waiting = _queued(doomed_job, base), _queued(waiting_job, base + timedelta(seconds=1))

    with EngineStandIn([doomed_job, waiting_job]) as engine:
        publish_run(doomed.id, 1)
        wait_until(lambda: _state(doomed.id) == RunState.RUNNING, what="the doomed run to start")
        publish_run(waiting.id, 1)
        wait_until(lambda: _state(waiting.id) == RunState.RETRY_WAIT, what="the other to wait")
        # SIGKILL the worker process running it: no outcome, no heartbeat any more.
        holder = JobRun.objects.get(id=doomed.id)
        os.kill(int(holder.worker.rsplit(":", 1)[1]), signal.SIGKILL)
        assert holder.lease_until is not None

        # The reaper finds the lease expired, queues the doomed run's next attempt, and gives
        # its slot to the run that was waiting (the older of the two waiting from then on).
        wait_until(
            lambda: (
                _state(waiting.id) == RunState.SUCCEEDED and _state(doomed.id) == RunState.SUCCEEDED
            ),
            timeout_s=60,
            what="both runs to succeed",
        )

    assert engine.most_running == 1
    started = RunAttempt.objects.get(run=waiting).started_at
    assert started is not None
    # The slot came back when the reaper found the lease expired, not before.
    reaped_at = RunAttempt.objects.get(run=doomed, attempt=1).finished_at
    assert reaped_at is not None
    assert started >= reaped_at > holder.lease_until
    assert list(
        RunAttempt.objects.filter(run=doomed).order_by("attempt").values_list("attempt", "outcome")
    ) == [(1, AttemptOutcome.LOST), (2, AttemptOutcome.SUCCEEDED)]
    assert RunAttempt.objects.get(run=waiting).attempt == 1
