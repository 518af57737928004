"""Redis failover under Sentinel, under a steady load: the master is SIGKILLed, the replica is
promoted, and the beat node and the worker carry on without a restart.

Both reach Redis through a Sentinel URL only (REDIS_URL, and the broker defaulting to it): the
leases, the change feed, the engine's raw broker client and Celery's consumer all find the
promoted replica by themselves. The lease keys are deleted on the new master right after the
promotion, as asynchronous replication loses the writes it had not yet shipped: the node then
re-takes its partitions with new epochs from PostgreSQL, and every firing still runs exactly
once at the target (nothing lost, no duplicate effect, no stale fence: docs/architecture.md,
Invariants).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from beat_engine.clock import SystemClock
from beat_engine.lease_keys import LEASE_KEY
from jobs.models import Job, JobRun, PartitionEpoch
from jobs.services.jobs import job_pause
from jobs.states import RunState
from tests.support import targets
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.sentinel import SentinelCluster
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

JOBS = 25  # one firing per job per second: 25 firings/s, which a loaded 2-core machine drains
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    # Messages the old master had not replicated are re-sent after 2 run leases (6 s).
    "SCHEDULER_RUN_LEASE_S": "3",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


@pytest.fixture
def sentinel_cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    cluster = SentinelCluster(tmp_path / "redis-ha")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _quiet() -> bool:
    return not JobRun.objects.exclude(
        state__in=[RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED]
    ).exists()


@pytest.mark.timeout(180)
def test_a_master_failover_loses_and_repeats_no_firing(
    sentinel_cluster: SentinelCluster, tmp_path: Path
) -> None:
    targets.ensure_side_effects_table()
    now = SystemClock().now()
    tenant = tenant_factory()
    anchor = now + timedelta(seconds=8)
    jobs = [
        job_factory(
            tenant,
            now=now,
            interval=timedelta(seconds=1),
            anchor_at=anchor,
            target_name="tests.effect_then_nap",
            payload={"seconds": 0},
            catchup_policy="replay_all",
            catchup_limit=1000,
            max_attempts=5,
            retry_base_delay=timedelta(seconds=1),
            retry_max_delay=timedelta(seconds=2),
        )
        for _ in range(JOBS)
    ]
    env = {**FAST, **sentinel_cluster.env()}
    node = BeatNode("ha", tmp_path, env)
    worker_environment = {**worker_env(allowlist=[]), **env}
    worker_environment.pop("CELERY_BROKER_URL", None)
    worker = CeleryWorker(["scheduler"], worker_environment, tmp_path / "worker.log", concurrency=4)
    try:
        worker.start()
        node.start()
        wait_until(
            lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).count() >= JOBS,
            timeout_s=60,
            what="a first second of firings to succeed",
        )
        pause_s(3)
        epochs_before = dict(PartitionEpoch.objects.values_list("partition", "epoch"))
        assert epochs_before, "precondition: the node holds its partitions"

        sentinel_cluster.kill_master()
        sentinel_cluster.wait_promoted()
        promoted_at = SystemClock().now()
        new_master = sentinel_cluster.replica.client()
        # What asynchronous replication may lose: the lease keys (whatever the replica got).
        new_master.delete(*[LEASE_KEY.format(partition=p) for p in epochs_before])
        pause_s(6)

        # The same processes carried on: neither exited nor was restarted.
        assert node.process is not None
        assert node.process.poll() is None, "the beat node exited"
        assert node.starts == 1
        assert worker.process is not None
        assert worker.process.poll() is None, worker.log_tail()
        stop_at = SystemClock().now()
        for job in jobs:
            job_pause(job_id=job.id, now=stop_at)
        wait_until(_quiet, timeout_s=60, what="every run to finish (quiescence)")
        assert node.process.poll() is None, "the beat node exited"
        assert worker.process.poll() is None, worker.log_tail()
    finally:
        node.stop()
        worker.stop()

    assert "Unrecoverable error" not in worker.log_tail(500_000)
    # Nothing lost, one run per firing: every instant from the anchor to each job's last
    # firing has exactly one run, and it succeeded.
    runs_total = 0
    for job in Job.objects.filter(id__in=[j.id for j in jobs]):
        assert job.last_fire_at is not None
        firings = int((job.last_fire_at - anchor).total_seconds()) + 1
        expected = [anchor + timedelta(seconds=k) for k in range(firings)]
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        assert [run.scheduled_for for run in runs] == expected, job.name
        assert {run.state for run in runs} == {RunState.SUCCEEDED}, job.name
        runs_total += len(runs)
    # Firings went on after the promotion, several seconds of them.
    after = JobRun.objects.filter(job__in=jobs, scheduled_for__gt=promoted_at).count()
    assert after >= 3 * JOBS, after
    # No duplicate effect: the target ran once per run, whatever was re-sent.
    executions = Counter(key for key, _attempt, _note in targets.side_effects())
    assert set(executions) == set(
        JobRun.objects.filter(job__in=jobs).values_list("dedup_key", flat=True)
    )
    assert set(executions.values()) == {1}, Counter(executions.values())
    assert len(executions) == runs_total
    # The lease keys were gone (deleted here, or expired during the failover) and ownership
    # was taken again with epochs PostgreSQL issued afresh.
    epochs_after = dict(PartitionEpoch.objects.values_list("partition", "epoch"))
    assert all(epochs_after[p] > epochs_before[p] for p in epochs_before), (
        epochs_before,
        epochs_after,
    )
    assert node.events("beat.lease.owned")[-1]["gained"]
