"""Subprocess beat nodes under SIGKILL, SIGSTOP and joins.

Checks nothing lost, one run per firing and no stale fence (docs/architecture.md, Invariants).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.partitions import assign_partitions
from beat_engine.redis_leases import LEASE_KEY
from jobs.models import Job, JobRun, PartitionEpoch
from tests.support.beat_nodes import BeatNode, broker_messages, message_args, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
}
PARTITIONS = 64


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, BeatNode]]:
    started: dict[str, BeatNode] = {}

    def make(name: str) -> BeatNode:
        node = BeatNode(name, tmp_path, dict(FAST))
        started[name] = node
        return node

    yield {name: make(name) for name in ("n1", "n2", "n3")}
    for node in started.values():
        node.stop()


def _owners(client: redis.Redis) -> dict[int, str | None]:
    keys = [LEASE_KEY.format(partition=p) for p in range(PARTITIONS)]
    values = client.mget(keys)
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def _database_now() -> datetime:
    """The database's clock, which stamps queued_at (one clock, docs/architecture.md)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (now,) = cursor.fetchone()
    return now


def _sleep_until(start: float, offset_s: float) -> None:
    pause_s(start + offset_s - time.monotonic())


def test_every_firing_lands_exactly_once_while_nodes_are_killed_and_restarted(
    redis_client: redis.Redis, nodes: dict[str, BeatNode]
) -> None:
    now = SystemClock().now()
    tenant = tenant_factory()
    anchor = now + timedelta(seconds=6)
    interval = timedelta(seconds=3)
    jobs = [
        job_factory(
            tenant, now=now, interval=interval, anchor_at=anchor, catchup_policy="replay_all"
        )
        for _ in range(200)
    ]
    one_offs = [
        job_factory(tenant, now=now, run_at=now + timedelta(seconds=8 + 2 * i)) for i in range(20)
    ]
    start = time.monotonic()
    for node in nodes.values():
        node.start()
    n1, n2, n3 = nodes["n1"], nodes["n2"], nodes["n3"]
    _sleep_until(start, 12)
    n1.kill()  # holds a third of the partitions; the others take them within the TTL
    _sleep_until(start, 18)
    n1.start()
    _sleep_until(start, 26)
    n2.kill()
    _sleep_until(start, 29)
    n3.kill()  # only the freshly restarted n1 is left
    _sleep_until(start, 36)
    n2.start()
    n3.start()
    _sleep_until(start, 50)
    checked_until = SystemClock().now() - timedelta(seconds=4)
    for node in nodes.values():
        node.stop()

    runs = list(JobRun.objects.values_list("job_id", "scheduled_for"))
    assert max(Counter(runs).values()) == 1  # one run per firing
    by_job: dict[object, set[datetime]] = {}
    for job_id, scheduled_for in runs:
        by_job.setdefault(job_id, set()).add(scheduled_for)
    steps = int((checked_until - anchor) / interval) + 1
    expected = {anchor + k * interval for k in range(steps)}
    assert steps >= 12
    for job in jobs:
        got = by_job.get(job.id, set())
        assert expected <= got, f"job {job.id} lost {sorted(expected - got)}"  # nothing lost
        assert all((t - anchor) % interval == timedelta(0) for t in got)  # no phantom firing
    for job in one_offs:
        assert len(by_job.get(job.id, set())) == 1
    assert Job.objects.filter(id__in=[j.id for j in one_offs], status="completed").count() == 20
    assert n1.starts == 2


def test_a_joining_node_takes_a_fair_share_and_a_resumed_zombie_claims_nothing(
    redis_client: redis.Redis, nodes: dict[str, BeatNode]
) -> None:
    now = SystemClock().now()
    tenant = tenant_factory()
    for _ in range(100):
        job_factory(tenant, now=now, interval=timedelta(seconds=1))
    n1, n2 = nodes["n1"], nodes["n2"]
    n1.start()
    wait_until(
        lambda: set(_owners(redis_client).values()) == {"n1"}, timeout_s=30, what="n1 to own all"
    )
    n2.start()
    fair = assign_partitions(PARTITIONS, ["n1", "n2"])
    expected = {p: n for n, parts in fair.items() for p in parts}
    wait_until(lambda: _owners(redis_client) == expected, timeout_s=30, what="a fair split")
    assert 31 <= len(fair["n2"]) <= 33

    pause_s(2)  # both nodes dispatch for a while
    zombie_epochs = set(PartitionEpoch.objects.filter(owner="n2").values_list("partition", "epoch"))
    assert len(zombie_epochs) == len(fair["n2"])
    n2.pause()
    # A claim stamped up to here was made before the freeze; with a second's margin for the
    # engine's sampled clock, still well before the resume (which waits out the 2 s lease TTL).
    frozen_by = _database_now() + timedelta(seconds=1)
    wait_until(
        lambda: PartitionEpoch.objects.filter(owner="n1").count() == PARTITIONS,
        timeout_s=30,
        what="n1 to take over the paused node's partitions",
    )
    taken_over_at = SystemClock().now()
    sent_before = {m["headers"]["id"] for m in broker_messages(redis_client)}
    n2.resume()
    pause_s(4)  # the zombie runs its loop: it must find its epochs refused, then may rejoin
    n1.stop()
    n2.stop()

    # No stale fence: after resuming, the zombie claimed nothing under an epoch it had lost (it
    # may rejoin and claim under new epochs, which the database issued to it afresh). What it
    # may still push under a lost epoch is the one window the pre-publish check leaves
    # (docs/engine.md, "Fencing"): a batch it had claimed before it was frozen, between that
    # check and its LPUSH; the worker's compare-and-set runs each such run at most once.
    stale = [
        m for m in broker_messages(redis_client)
        if m["headers"]["origin"] == "n2" and m["headers"]["id"] not in sent_before
        and (m["headers"]["sched_partition"], m["headers"]["sched_epoch"]) in zombie_epochs
    ]  # fmt: skip
    stale_runs = JobRun.objects.filter(id__in=[message_args(m)[0] for m in stale])
    # created_at is the claim's instant; queued_at is a claim ahead's instant to come
    # (docs/engine.md, "Claim ahead").
    claimed_while_frozen = [
        (str(r.id), r.created_at) for r in stale_runs if r.created_at > frozen_by
    ]
    assert claimed_while_frozen == [], f"frozen by {frozen_by}, taken over at {taken_over_at}"
    assert stale_runs.count() == len(stale)  # one message per run, not a re-send loop
    late = JobRun.objects.filter(created_at__gt=taken_over_at)
    assert late.exists()
    assert not [r for r in late.values_list("partition", "epoch") if r in zombie_epochs]
    lost_or_fenced = n2.events("beat.lease.lost") + n2.events("beat.fenced")
    assert lost_or_fenced
