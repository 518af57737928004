"""Short leases under claim load: no false failover, then a real one.

Two real beat nodes with a 3 s lease TTL (renewal every second) claim a 20,000-firing spike,
which keeps their engine threads busy, and in the middle of it every claim statement is held
for longer than the TTL (another session holds the partitions' fence rows): neither node loses
a lease and no partition changes owner, because the lease keeper renews off the engine's
thread (beat_engine/lease_keeper.py); renewing in the tick, both lost every lease and took
them back with new epochs.
Then one node is killed with SIGKILL: the survivor takes its partitions, and every firing of
the spike and of a steady load has exactly one run (nothing lost, one run per firing,
docs/architecture.md, Invariants). Counts only; the timings are bench/bench_failover.py's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import redis
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.partitions import assign_partitions
from beat_engine.redis_leases import LEASE_KEY
from bench.bench_engine import SEED_SQL
from jobs.models import JobRun, PartitionEpoch
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import tenant_factory
from tests.support.waiting import test_database_url, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

SHORT = {
    "SCHEDULER_LEASE_TTL_S": "3",
    "SCHEDULER_LEASE_RENEW_S": "1",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
}
PARTITIONS = 64
SPIKE = 20_000
STEADY = 100
# Longer than the TTL: renewal waiting behind the blocked claim would let every lease lapse.
BLOCKED_CLAIM_S = 4.5


def _seed(tenant_id: int, *, count: int, anchor: datetime, interval_s: int, spread_ms: int,
          prefix: str) -> None:  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            SEED_SQL,
            {"tenant": tenant_id, "prefix": prefix, "interval": interval_s, "anchor": anchor,
             "spread": spread_ms, "count": count},
        )  # fmt: skip
        cursor.execute(
            "UPDATE jobs_job SET catchup_policy = 'replay_all' WHERE name LIKE %s", [prefix + "%"]
        )
        cursor.execute("ANALYZE jobs_job")


def _owners(client: redis.Redis) -> dict[int, str | None]:
    values = client.mget([LEASE_KEY.format(partition=p) for p in range(PARTITIONS)])
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def _epochs() -> dict[int, tuple[int, str]]:
    return {
        p: (epoch, owner)
        for p, epoch, owner in PartitionEpoch.objects.values_list("partition", "epoch", "owner")
    }


def _missing_from_grid(prefix: str, until: datetime) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FROM jobs_job j
             CROSS JOIN LATERAL generate_series(j.anchor_at, %s, interval '1 second') AS g(at)
             WHERE j.name LIKE %s
               AND NOT EXISTS (SELECT 1 FROM jobs_jobrun r
                                WHERE r.job_id = j.id AND r.scheduled_for = g.at)
            """,
            [until, prefix + "%"],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def test_a_spike_loses_no_lease_and_a_killed_node_fails_over(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    tenant = tenant_factory()
    now = SystemClock().now()
    steady_anchor = now + timedelta(seconds=6)
    spike_at = now + timedelta(seconds=14)
    _seed(tenant.id, count=STEADY, anchor=steady_anchor, interval_s=1, spread_ms=1000,
          prefix="steady-")  # fmt: skip
    _seed(tenant.id, count=SPIKE, anchor=spike_at, interval_s=86_400, spread_ms=1,
          prefix="spike-")  # fmt: skip
    n1, n2 = BeatNode("n1", tmp_path, dict(SHORT)), BeatNode("n2", tmp_path, dict(SHORT))
    try:
        n1.start()
        n2.start()
        fair = assign_partitions(PARTITIONS, ["n1", "n2"])
        split = {p: n for n, parts in fair.items() for p in parts}
        wait_until(lambda: _owners(redis_client) == split, timeout_s=30, what="a fair split")
        # A partition handed over is first written with the new owner's name by the old owner
        # (a hand-over epoch), then taken by the new owner with an epoch of its own: the split
        # is settled once each node says it owns its share, which it logs after its take.
        wait_until(
            lambda: (
                all(
                    (owned := node.events("beat.lease.owned"))
                    and set(owned[-1]["owned"]) == set(fair[node.node_id])
                    for node in (n1, n2)
                )
                and all(split[p] == o for p, (_e, o) in _epochs().items())
            ),
            timeout_s=10,
            what="the epochs of the split",
        )
        before = _epochs()
        assert SystemClock().now() < spike_at, "the nodes took too long to start"

        spike_runs = JobRun.objects.filter(job__name__startswith="spike-")
        wait_until(lambda: spike_runs.exists(), timeout_s=30, what="the spike to start")
        with psycopg.connect(test_database_url()) as blocker:
            # Every claim's fence waits on these row locks (beat_engine/fencing.py).
            blocker.execute("SELECT partition FROM jobs_partitionepoch FOR UPDATE")
            pause_s(BLOCKED_CLAIM_S)
        wait_until(lambda: spike_runs.count() == SPIKE, timeout_s=45, what="the spike claimed")
        pause_s(1)  # a renewal after the last claim: a lapse during the spike is seen by now

        # No false alarm: no lease lost, nothing fenced, and no partition got a new epoch.
        for node in (n1, n2):
            assert node.events("beat.lease.lost") == [], node.node_id
            assert node.events("beat.fenced") == [], node.node_id
        assert _epochs() == before
        assert _owners(redis_client) == split

        n1.kill()
        wait_until(
            lambda: (
                set(_owners(redis_client).values()) == {"n2"}
                and all(o == "n2" for _e, o in _epochs().values())
            ),
            timeout_s=20,
            what="the survivor to take the killed node's partitions",
        )
        pause_s(2)  # the survivor replays what fell due while the leases ran out
        until = SystemClock().now() - timedelta(seconds=1)
    finally:
        n1.stop()
        n2.stop()

    taken = [p for p, (epoch, owner) in _epochs().items() if before[p][1] == "n1"]
    assert len(taken) == len(fair["n1"])
    assert all(_epochs()[p][0] > before[p][0] for p in taken)  # taken with new epochs
    # Nothing lost, one run per firing: the spike's and the steady load's across the kill.
    assert spike_runs.count() == SPIKE
    assert _missing_from_grid("steady-", until) == 0
    steady = JobRun.objects.filter(job__name__startswith="steady-")
    assert steady.filter(scheduled_for__gt=until - timedelta(seconds=3)).exists()
