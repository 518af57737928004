"""A broker connection loss while attempts run: Redis drops every client, or restarts.

Attempts already running must carry on and finish once: their leases live in PostgreSQL, so
their heartbeats never notice the broker, and the copy of each message that kombu restores to
the queue when the consumer reconnects is dropped by the start compare-and-set. When Redis is
still down as the consumer closes its channel, the installed kombu stops the worker's main
process instead of reconnecting (docs/execution.md, "Broker connection loss"); it stops
warmly, and the same checks hold.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from beat_engine.clock import SystemClock
from jobs.models import JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from scheduler_project.embedded import RedisServer
from tests.support import targets
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

# Fewer long attempts than pool processes: a worker with a free process keeps consuming, so it
# notices at once that its connection is gone (a worker whose processes are all busy reads
# nothing from the broker until one is free).
CONCURRENCY = 3
LONG_RUNS = 2
NAP_S = 8
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    # A lease shorter than the blip and the nap: an attempt the worker stopped heartbeating
    # would be reaped and run again while the test watches.
    "SCHEDULER_RUN_LEASE_S": "3",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


def _drop_every_client(server: RedisServer) -> None:
    client = redis.Redis(unix_socket_path=str(server.socket_path))
    try:
        # Every normal connection (the worker's consumer, its publisher, the beat node's) is
        # closed by the server; ours is skipped (SKIPME defaults to yes).
        dropped = client.execute_command("CLIENT", "KILL", "TYPE", "normal")
    finally:
        client.close()
    assert int(dropped) > 0


def _restart(server: RedisServer) -> None:
    # A clean restart: the append-only file keeps the queue and kombu's unacked index.
    server.stop()
    pause_s(1)
    server.start()


def _restart_unnoticed(server: RedisServer, worker: CeleryWorker) -> None:
    """A restart over before the worker's consumer reacts (a quick failover, a busy host).

    Only the worker's main process, which holds the broker connection, is paused; its pool
    processes keep running their targets and heartbeating.
    """
    assert worker.process is not None
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        _restart(server)
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["client_kill", "restart_unnoticed", "restart"])
def test_running_attempts_survive_a_broker_connection_loss(
    fault: str, own_redis: RedisServer, tmp_path: Path
) -> None:
    targets.ensure_side_effects_table()
    now = SystemClock().now()
    tenant = tenant_factory()
    jobs = [
        job_factory(
            tenant,
            now=now,
            run_at=now + timedelta(seconds=3),
            target_name="tests.effect_then_nap",
            payload={"seconds": NAP_S},
            max_attempts=3,
            retry_base_delay=timedelta(seconds=1),
            retry_max_delay=timedelta(seconds=2),
        )
        for _ in range(LONG_RUNS)
    ]
    env = {**FAST, "REDIS_URL": own_redis.url}
    node = BeatNode("blip", tmp_path, env)
    worker_environment = {**worker_env(allowlist=[]), **env}
    worker_environment.pop("CELERY_BROKER_URL", None)
    worker = CeleryWorker(
        ["scheduler"], worker_environment, tmp_path / "worker.log", concurrency=CONCURRENCY
    )
    runs = JobRun.objects.filter(job__in=jobs)
    try:
        worker.start()
        node.start()
        wait_until(
            lambda: (
                runs.filter(state=RunState.RUNNING).count() == LONG_RUNS
                and len(targets.side_effects()) == LONG_RUNS
            ),
            timeout_s=60,
            what="every attempt to be running its target",
        )
        if fault == "client_kill":
            _drop_every_client(own_redis)
        elif fault == "restart_unnoticed":
            _restart_unnoticed(own_redis, worker)
        else:
            _restart(own_redis)
        wait_until(
            lambda: "Connection to broker lost" in worker.log_tail(50_000),
            timeout_s=30,
            what="the worker to notice the lost broker connection",
        )
        wait_until(
            lambda: (
                not runs.exclude(
                    state__in=[RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED]
                ).exists()
            ),
            timeout_s=90,
            what="every run to finish",
        )
        # Past a few run leases: a reaper that thought an attempt lost would have re-queued it.
        pause_s(float(FAST["SCHEDULER_RUN_LEASE_S"]) * 2)
    finally:
        node.stop()
        worker.stop()

    log = worker.log_tail(200_000)
    assert "Terminating it instead" not in log, log[-4000:]
    for run in runs:
        assert run.state == RunState.SUCCEEDED, (run.state, run.last_error)
        assert run.attempt == 1, f"run {run.id} needed attempt {run.attempt}"
        attempts = list(RunAttempt.objects.filter(run=run).values_list("attempt", "outcome"))
        assert attempts == [(1, AttemptOutcome.SUCCEEDED)], attempts
    # The target itself ran once per firing: no second execution after the blip.
    executions = Counter(key for key, _attempt, _note in targets.side_effects())
    assert sorted(executions.values()) == [1] * LONG_RUNS, executions
    assert set(executions) == {run.dedup_key for run in runs}
