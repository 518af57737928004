"""Workers stopped with a backlog: a real beat node, real Redis and PostgreSQL, short settings.

While no worker runs, the broker holds one message per queued run and Redis's memory stays
flat however many sweep periods pass (bounded redelivery); Redis then loses every key and
each run is sent again within republish_after_s plus a sweep period (Redis is a hint); a
worker started at last runs every run exactly once (docs/architecture.md, Invariants).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from beat_engine.clock import SystemClock
from beat_engine.config import EngineConfig
from beat_engine.publisher import PRIORITY_SEP, PRIORITY_STEPS
from jobs.models import JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from scheduler_project.embedded import RedisServer
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

RUNS = 200
RUN_LEASE_S = 1.0
# The engine's own: republish_after_s is twice the run lease, and the sweep runs every 2 s.
REPUBLISH_AFTER_S = 2 * RUN_LEASE_S
SWEEP_S = EngineConfig.sweep_s
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": str(RUN_LEASE_S),
    "SCHEDULER_HEARTBEAT_S": "0.3",
}
QUEUES = ["scheduler", *(f"scheduler{PRIORITY_SEP}{s}" for s in PRIORITY_STEPS if s)]


def _messages(client: redis.Redis) -> int:
    return sum(int(client.llen(queue)) for queue in QUEUES)


def _keyspace_bytes(client: redis.Redis) -> int:
    """Bytes held by every key Redis has (MEMORY USAGE, exact), the broker's lists included.

    This is what a growing backlog or a leak of keys would grow. Redis's used_memory, and the
    dataset figure INFO derives from it, also move by tens of KiB with the node's connections,
    their buffers and the allocator's bookkeeping, however flat the keyspace is.
    """
    return sum(int(client.memory_usage(key, samples=0) or 0) for key in client.scan_iter())


def _sample(client: redis.Redis, seconds: float) -> list[tuple[int, int]]:
    """(messages in the broker, bytes held by Redis's keys) every quarter second."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append((_messages(client), _keyspace_bytes(client)))
        pause_s(0.25)
    return samples


@pytest.mark.timeout(120)
def test_workers_stopped_with_a_backlog(own_redis: RedisServer, tmp_path: Path) -> None:
    now = SystemClock().now()
    tenant = tenant_factory()
    anchor = now + timedelta(seconds=3)
    for _ in range(RUNS):
        job_factory(tenant, now=now, interval=timedelta(hours=1), anchor_at=anchor)
    env = {**FAST, "REDIS_URL": own_redis.url}
    broker = redis.Redis.from_url(own_redis.url)
    node = BeatNode("backlog", tmp_path, env)
    worker_environment = {**worker_env(allowlist=[]), **env}
    worker_environment.pop("CELERY_BROKER_URL", None)
    worker = CeleryWorker(["scheduler"], worker_environment, tmp_path / "worker.log")
    queued = JobRun.objects.filter(state=RunState.QUEUED, published_at__isnull=False)
    try:
        node.start()
        wait_until(lambda: queued.count() == RUNS, timeout_s=30, what="every run sent")

        # No worker for five republish periods: nothing is sent twice, memory stays flat.
        samples = _sample(broker, 5 * REPUBLISH_AFTER_S + SWEEP_S)
        assert {count for count, _ in samples} == {RUNS}, samples
        memory = [used for _, used in samples]
        # Flat: one message per run, the same ones. The lease keys, the node registry and its
        # id key may change size by a few bytes as they are rewritten, not by messages.
        assert max(memory) - min(memory) < 4 * 1024, memory
        assert node.events("beat.still_waiting"), "the sweep looked at the waiting runs"
        assert not node.events("beat.republish")

        # Redis loses every key (a flush, a restart without persistence).
        broker.flushall()
        lost_at = time.monotonic()
        # Within republish_after_s + a sweep period, plus a lease renewal and a tick.
        bound_s = REPUBLISH_AFTER_S + SWEEP_S + 0.5 + 1.0
        wait_until(lambda: _messages(broker) == RUNS, timeout_s=bound_s + 5, what="re-sent")
        resent_after_s = time.monotonic() - lost_at
        assert resent_after_s <= bound_s, resent_after_s
        # Once each: the messages stay at one per run through two more periods.
        assert {count for count, _ in _sample(broker, 2 * REPUBLISH_AFTER_S + SWEEP_S)} == {RUNS}

        worker.start()
        wait_until(
            lambda: not JobRun.objects.exclude(state=RunState.SUCCEEDED).exists(),
            timeout_s=60,
            what="every run to succeed",
        )
    finally:
        node.stop()
        worker.stop()

    runs = JobRun.objects.all()
    assert runs.count() == RUNS
    assert set(runs.values_list("attempt", flat=True)) == {1}
    # Exactly once: one attempt started per run, and it succeeded.
    attempts = list(RunAttempt.objects.values_list("run_id", "outcome"))
    assert len(attempts) == RUNS
    assert {outcome for _, outcome in attempts} == {AttemptOutcome.SUCCEEDED}
    assert len({run_id for run_id, _ in attempts}) == RUNS
    assert _messages(broker) == 0
