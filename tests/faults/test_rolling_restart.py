"""A rolling deploy under a steady load: three beat nodes restarted one at a time (SIGTERM,
then started again under the same default node id), then two workers one at a time.

Every firing runs exactly once at the target (nothing lost, one run per firing: docs/
architecture.md, Invariants), no attempt is left running or reaped (each worker's warm
shutdown lets its running attempts finish), each restarted node gets its own partitions
back, and at every sample of the lease keys through the node restarts every partition has
an owner (a hand-over replaces the key, never deletes it). The timing figures (publish
lateness) come from bench/bench_rolling.py.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings

from beat_engine.clock import SystemClock
from beat_engine.lease_keys import lease_key
from beat_engine.partitions import assign_partitions
from jobs.models import Job, JobRun, RunAttempt
from jobs.services.jobs import job_pause
from jobs.states import AttemptOutcome, RunState
from tests.support import targets
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

# One firing per job per second: 40 firings/s, what two small workers on a shared 2-core CI
# machine keep up with (bench/bench_rolling.py runs 1,000/s).
JOBS = 40
PARTITIONS = 64
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": "5",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


def _owners(client: redis.Redis) -> dict[int, str | None]:
    values = client.mget([lease_key(p) for p in range(PARTITIONS)])
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def _quiet() -> bool:
    return not JobRun.objects.exclude(
        state__in=[RunState.SUCCEEDED, RunState.DEAD, RunState.FAILED]
    ).exists()


class OwnerSampler(threading.Thread):
    """Reads every partition's lease key in a loop; keeps the samples in which one had none."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(settings.REDIS_URL)
        self.stop = threading.Event()
        self.samples = 0
        self.unowned: list[list[int]] = []

    def run(self) -> None:
        while not self.stop.wait(0.005):
            owners = _owners(self.client)
            self.samples += 1
            missing = [p for p, owner in owners.items() if owner is None]
            if missing:
                self.unowned.append(missing)


@pytest.fixture
def beat_nodes(tmp_path: Path) -> Iterator[list[BeatNode]]:
    nodes = [BeatNode(f"slot-{slot}", tmp_path, dict(FAST), slot=slot) for slot in range(3)]
    yield nodes
    for node in nodes:
        node.stop()


def _stop_gracefully(worker: CeleryWorker) -> None:
    """SIGTERM to the worker's main process only, as a service manager sends it: its warm
    shutdown lets the running attempts finish, and the pool children exit after them."""
    assert worker.process is not None
    worker.process.send_signal(signal.SIGTERM)
    # The warm shutdown is bounded by the soft-shutdown timeout (10 s here); the rest is
    # headroom for a loaded 2-core machine, where the pool's hand-back and exit crawl.
    try:
        worker.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"worker still running 60 s after SIGTERM: {worker.log_tail()}"
        ) from None


@pytest.mark.timeout(300)
def test_a_rolling_restart_of_nodes_and_workers_loses_and_repeats_nothing(
    redis_client: redis.Redis, beat_nodes: list[BeatNode], tmp_path: Path
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
            payload={"seconds": 0.02},
            catchup_policy="replay_all",
            catchup_limit=1000,
        )
        for _ in range(JOBS)
    ]
    env = {**worker_env(allowlist=[]), **FAST, "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": "10"}
    workers = [
        CeleryWorker(["scheduler"], env, tmp_path / f"worker-{i}.log", concurrency=4)
        for i in range(2)
    ]
    host = socket.gethostname()
    ids = [f"{host}-{slot}" for slot in range(3)]
    fair = assign_partitions(PARTITIONS, ids)
    expected = {p: n for n, parts in fair.items() for p in parts}
    for node in beat_nodes:
        # A lease outlives a node starved of CPU for a while on a loaded machine: the keys
        # are sampled for hand-overs, not for lapses (failover is tested elsewhere).
        node.env_overrides["SCHEDULER_LEASE_TTL_S"] = "6"
    sampler = OwnerSampler()
    try:
        for worker in workers:
            worker.start()
        for node in beat_nodes:
            node.start()
        wait_until(lambda: _owners(redis_client) == expected, timeout_s=30, what="a fair split")
        wait_until(
            lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).count() >= JOBS,
            timeout_s=30,
            what="a first second of firings to succeed",
        )
        rolled_from = SystemClock().now()
        _roll_nodes(beat_nodes, ids, expected, redis_client, sampler)
        rolled_until = SystemClock().now()
        for worker in workers:
            _stop_gracefully(worker)
            assert worker.process is not None
            assert worker.process.returncode == 0, worker.log_tail()
            worker.start()
        pause_s(1)
        stop_at = SystemClock().now()
        for job in jobs:
            job_pause(job_id=job.id, now=stop_at)
        try:
            wait_until(_quiet, timeout_s=40, what="every run to finish (quiescence)")
        except AssertionError:
            states = Counter(JobRun.objects.values_list("state", flat=True))
            raise AssertionError(f"runs by state: {dict(states)}") from None
        final_owners = _owners(redis_client)
    finally:
        sampler.stop.set()
        for node in beat_nodes:
            node.stop()
        for worker in workers:
            worker.stop()

    # Through six hand-overs (three leaves, three joins), no sample found a partition without
    # an owner's key.
    assert sampler.samples > 100, sampler.samples
    assert sampler.unowned == [], sampler.unowned[:3]
    for node, node_id in zip(beat_nodes, ids, strict=True):
        _assert_took_back_its_share(node, node_id, fair[node_id])
    assert final_owners == expected
    _assert_each_firing_ran_once(jobs, anchor, rolled_from, rolled_until)


def _roll_nodes(
    beat_nodes: list[BeatNode],
    ids: list[str],
    expected: dict[int, str],
    client: redis.Redis,
    sampler: OwnerSampler,
) -> None:
    sampler.start()
    for node, node_id in zip(beat_nodes, ids, strict=True):
        node.stop()  # SIGTERM: its leases are handed to the others, which take them at once
        node.start()  # the same default id: its own share comes back to it
        wait_until(
            lambda: _owners(client) == expected,
            # A generous bound: a node's start-up (Django, its imports) takes seconds on a
            # loaded machine; the test asserts what happens, never how fast.
            timeout_s=60,
            what=f"{node_id} to get its partitions back",
        )
    sampler.stop.set()
    sampler.join()


def _assert_took_back_its_share(node: BeatNode, node_id: str, share: frozenset[int]) -> None:
    """The node ran twice under its default id, and after its restart took its own share
    back, and nothing else, before anything else moved."""
    assert node.starts == 2
    events = node.events()
    starts = [i for i, e in enumerate(events) if e.get("event") == "beat.start"]
    assert [events[i]["node"] for i in starts] == [node_id, node_id]
    second_life = [e for e in events[starts[1] :] if e.get("event") == "beat.lease.owned"]
    settled = next(i for i, e in enumerate(second_life) if set(e["owned"]) == share)
    assert {p for e in second_life[: settled + 1] for p in e["gained"]} == share
    assert all(e["lost"] == [] for e in second_life[: settled + 1])


def _assert_each_firing_ran_once(
    jobs: list[Job], anchor: datetime, rolled_from: datetime, rolled_until: datetime
) -> None:
    # Nothing lost, one run per firing, every run succeeded on its first attempt.
    runs_total = 0
    for job in Job.objects.filter(id__in=[j.id for j in jobs]):
        assert job.last_fire_at is not None
        firings = int((job.last_fire_at - anchor).total_seconds()) + 1
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        assert [r.scheduled_for for r in runs] == [
            anchor + timedelta(seconds=k) for k in range(firings)
        ], job.name
        assert {r.state for r in runs} == {RunState.SUCCEEDED}, job.name
        # The load ran through every node restart: firings before the first and after the
        # last (the workers' restarts come after it).
        assert runs[0].scheduled_for < rolled_from, job.name
        assert runs[-1].scheduled_for > rolled_until, job.name
        runs_total += len(runs)
    # Nothing was left running by a stopping worker: no attempt was reaped as lost.
    assert not RunAttempt.objects.filter(outcome=AttemptOutcome.LOST).exists()
    assert not JobRun.objects.filter(attempt__gt=1).exists()
    # No duplicate effect: the target ran once per run.
    executions = Counter(key for key, _attempt, _note in targets.side_effects())
    assert len(executions) == runs_total
    assert set(executions.values()) == {1}, Counter(executions.values())


def test_a_second_process_with_a_running_nodes_id_refuses_to_start(
    redis_client: redis.Redis, beat_nodes: list[BeatNode], tmp_path: Path
) -> None:
    first = beat_nodes[0]
    first.start()
    node_id = f"{socket.gethostname()}-0"
    wait_until(
        lambda: set(_owners(redis_client).values()) == {node_id}, timeout_s=30, what="one owner"
    )
    second = BeatNode("slot-0-again", tmp_path, dict(FAST), slot=0)
    second.start()
    assert second.process is not None
    try:
        code = second.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        second.stop()
        raise
    assert code != 0
    log = second.log_path.read_text()
    assert f"node id '{node_id}' is in use by a running process" in log
    assert second.events("beat.lease.owned") == []
    assert set(_owners(redis_client).values()) == {node_id}
    assert first.process is not None
    assert first.process.poll() is None
