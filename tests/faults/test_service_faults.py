"""End to end through service faults: Redis loses every key, PostgreSQL drops every
connection, the worker is SIGKILLed. Checks nothing lost, one run per firing with one
successful attempt, never early and quiescence (docs/architecture.md, Invariants).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun, RunAttempt
from jobs.services.jobs import job_pause
from jobs.states import AttemptOutcome, RunState
from scheduler_project.embedded import RedisServer
from tests.support import targets  # noqa: F401  (registers the tests.* callables)
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

INTERVAL_S = 2
# The firings (JOBS / INTERVAL_S a second, each a 0.4 s nap) stay below what the worker's
# WORKER_SLOTS drain, so the backlog the faults leave is bounded whatever the machine's load:
# the wait for quiescence does not grow with the time the faults took to stage.
JOBS = 15
WORKER_SLOTS = 4
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": "3",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


def _wipe_and_restart(server: RedisServer) -> None:
    """A restart without persistence: every lease, node entry and queued message is gone."""
    server.stop()
    for path in server.data_dir.iterdir():
        if path.name.startswith("appendonly") or path.suffix == ".rdb":
            if path.is_dir():
                for child in path.iterdir():
                    child.unlink()
                path.rmdir()
            else:
                path.unlink()
    server.start()


def _terminate_other_backends() -> int:
    params = connection.get_connection_params()
    conninfo = psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in {"dbname", "user", "password", "host", "port"}}
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' AND pid <> %s",
            [connection.connection.info.backend_pid if connection.connection else 0],
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.timeout(300)
def test_firings_survive_redis_wipe_postgres_disconnects_and_worker_kill(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    now = SystemClock().now()
    tenant = tenant_factory()
    anchor = now + timedelta(seconds=8)
    jobs = [
        job_factory(
            tenant,
            now=now,
            interval=timedelta(seconds=INTERVAL_S),
            anchor_at=anchor,
            target_name="tests.nap",
            payload={"seconds": 0.4},
            # Replay every firing a fault delayed: this test counts all of them.
            catchup_policy="replay_all",
            catchup_limit=1000,
            max_attempts=10,
            retry_base_delay=timedelta(seconds=1),
            retry_max_delay=timedelta(seconds=2),
        )
        for _ in range(JOBS)
    ]
    env = {**FAST, "REDIS_URL": own_redis.url}
    nodes = [BeatNode(name, tmp_path, env) for name in ("n1", "n2")]
    worker_environment = {**worker_env(allowlist=[]), **env}
    worker_environment.pop("CELERY_BROKER_URL", None)
    worker = CeleryWorker(
        ["scheduler"], worker_environment, tmp_path / "worker.log", concurrency=WORKER_SLOTS
    )
    try:
        worker.start()
        for node in nodes:
            node.start()
        wait_until(
            lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).exists(),
            timeout_s=60,
            what="the first successful run",
        )
        # Let messages pile up in the broker, then lose them all with Redis's keys.
        worker.stop()
        pause_s(4)
        waiting = JobRun.objects.filter(state=RunState.QUEUED, published_at__isnull=False)
        assert waiting.exists(), "precondition: the wipe must destroy published messages"
        _wipe_and_restart(own_redis)
        worker.start()
        start = time.monotonic()
        pause_s(start + 5 - time.monotonic())
        assert _terminate_other_backends() > 0
        pause_s(start + 10 - time.monotonic())
        worker.kill()
        worker.start()
        pause_s(start + 16 - time.monotonic())
        stop_at = SystemClock().now()
        for job in jobs:
            job_pause(job_id=job.id, now=stop_at)

        def quiet() -> bool:
            return not JobRun.objects.exclude(
                state__in=[RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED]
            ).exists()

        wait_until(quiet, timeout_s=120, what="every run to finish (I7)")
    finally:
        for node in nodes:
            node.stop()
        worker.stop()

    for job in Job.objects.filter(id__in=[j.id for j in jobs]):
        assert job.last_fire_at is not None
        firings = int((job.last_fire_at - anchor).total_seconds()) // INTERVAL_S + 1
        expected = [anchor + timedelta(seconds=INTERVAL_S * k) for k in range(firings)]
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        # I1 and I2: every firing up to the last one claimed has exactly one run, no gaps.
        assert [run.scheduled_for for run in runs] == expected, job.name
        assert {run.state for run in runs} == {RunState.SUCCEEDED}, job.name
        for run in runs:
            # I5: no attempt started before its firing's instant.
            assert run.started_at is not None
            assert run.started_at >= run.scheduled_for
    # The kill caught attempts mid-run; their runs were re-queued and still succeeded once.
    assert RunAttempt.objects.filter(run__job__in=jobs, outcome=AttemptOutcome.LOST).exists()
    succeeded = RunAttempt.objects.filter(
        run__job__in=jobs, outcome=AttemptOutcome.SUCCEEDED
    ).values_list("run_id", flat=True)
    # One successful attempt per run: a duplicate delivery never ran the target twice.
    assert len(succeeded) == len(set(succeeded))
    assert len(succeeded) == JobRun.objects.filter(job__in=jobs).count()
