"""A hand-over moves each lease key straight to its new owner, and supersedes the old owner's
epoch in PostgreSQL first; a joining node loads its share before it asks for it.

The fake clock never moves: every partition changes hands on the change feed's
announcements alone. Between the old owner's step and the new owner's, the keys are sampled:
none is ever absent, and the old owner's epochs are already refused (no stale fence,
docs/architecture.md, Invariants).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection, transaction

from beat_engine.claims import commit_claim
from beat_engine.engine import BeatEngine
from beat_engine.fencing import epochs_current, fence
from beat_engine.horizon import HORIZON_SQL
from beat_engine.lease_keys import lease_key
from beat_engine.notifications import ChangeFeed
from beat_engine.partitions import assign_partitions
from beat_engine.redis_leases import RedisLeaseStore
from jobs.models import Job, JobRun, PartitionEpoch
from jobs.services.jobs import job_pause
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _engine(clock: FakeClock, node_id: str) -> BeatEngine:
    engine = make_engine(clock, node_id=node_id)
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    return engine


def _owners(client: redis.Redis, partitions: int) -> dict[int, str | None]:
    values = client.mget([lease_key(p) for p in range(partitions)])
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def _two_nodes_split() -> tuple[BeatEngine, BeatEngine]:
    """node-a, then node-b joining: each hears the other and they hold their fair shares."""
    clock = FakeClock(T0)
    a = _engine(clock, "node-a")
    a.tick()
    b = _engine(clock, "node-b")
    b.tick()
    _hear(a)
    a.tick()
    _hear(b)
    b.tick()
    return a, b


def _hear(engine: BeatEngine) -> None:
    """Wait for the next announcement on the engine's feed (its sleep)."""
    assert engine.feed is not None
    engine.feed.wait(5.0)


def _zombie_refused(epochs: dict[int, int]) -> None:
    """What the old owner would still try under its epochs: its pre-publish check and a
    claim's fence both find none of them current."""
    assert epochs
    assert epochs_current(epochs) == frozenset()
    with transaction.atomic():
        assert fence(epochs, now=T0) == frozenset()


def test_a_joining_node_is_handed_each_key_with_no_instant_unowned(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    a = _engine(clock, "node-a")
    a.tick()
    partitions = a.config.partitions
    a_epochs = {p: lease.epoch for p, lease in a.leases.items()}
    b = _engine(clock, "node-b")
    b.tick()  # registers and asks: its whole share is still node-a's
    fair = assign_partitions(partitions, ["node-a", "node-b"])
    expected = {p: n for n, parts in fair.items() for p in parts}
    assert b.ownership.waiting_for == fair["node-b"]

    _hear(a)
    a.tick()  # hands node-b's share over
    # Before node-b has done anything: every key names its new owner, none is absent.
    assert _owners(redis_client, partitions) == expected
    handed = {p: a_epochs[p] for p in fair["node-b"]}
    _zombie_refused(handed)
    rows = PartitionEpoch.objects.filter(partition__in=fair["node-b"])
    assert {r.owner for r in rows} == {"node-b"}
    assert all(r.epoch == a_epochs[r.partition] + 1 for r in rows)

    _hear(b)
    b.tick()
    assert set(b.leases) == fair["node-b"]
    assert b.ownership.waiting_for == frozenset()
    # node-b's own epochs, above the ones issued for the hand-over.
    assert all(lease.epoch == a_epochs[p] + 2 for p, lease in b.leases.items())
    assert set(epochs_current({p: lease.epoch for p, lease in b.leases.items()})) == set(
        fair["node-b"]
    )
    assert _owners(redis_client, partitions) == expected
    a.shutdown()
    b.shutdown()


def test_a_stopping_node_hands_its_keys_to_the_survivors(redis_client: redis.Redis) -> None:
    a, b = _two_nodes_split()
    partitions = a.config.partitions
    b_epochs = {p: lease.epoch for p, lease in b.leases.items()}
    assert b_epochs

    b.shutdown()  # SIGTERM: hands everything to node-a, then leaves
    assert _owners(redis_client, partitions) == dict.fromkeys(range(partitions), "node-a")
    _zombie_refused(b_epochs)
    _hear(a)
    a.tick()
    assert sorted(a.leases) == list(range(partitions))
    assert a.ownership.waiting_for == frozenset()
    a.shutdown()
    # The last node lets its keys go: nobody is left to hand them to.
    assert set(_owners(redis_client, partitions).values()) == {None}


def _horizon_queries(sink: list[list[Any]]) -> Callable[..., Any]:
    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if sql == HORIZON_SQL:
            sink.append(list(params))
        return execute(sql, params, many, ctx)

    return wrapper


def test_a_joining_node_loads_its_share_before_asking_and_reads_only_the_difference(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    tenant = tenant_factory()

    def a_job() -> Job:
        return job_factory(
            tenant, interval=timedelta(seconds=10), anchor_at=T0 + timedelta(seconds=5)
        )

    jobs = [a_job() for _ in range(30)]
    a = _engine(clock, "node-a")
    a.tick()
    b = _engine(clock, "node-b")
    b.tick()  # loads its share's horizon, then registers and asks
    share = assign_partitions(a.config.partitions, ["node-a", "node-b"])["node-b"]
    mine = [j for j in jobs if j.partition in share]
    assert mine

    # Changed after node-b loaded its share, before it holds it: one paused, new ones.
    job_pause(job_id=mine[0].id, now=T0)
    added = [a_job() for _ in range(10)]
    b.tick()  # hears the changes (its share is not its yet)
    _hear(a)
    a.tick()
    _hear(b)
    queries: list[list[Any]] = []
    with connection.execute_wrapper(_horizon_queries(queries)):
        b.tick()
    assert set(b.leases) == share

    # The hand-over read only what lies past the staged horizon: every partition of the
    # query has a lower bound (a full load has none).
    assert queries
    for params in queries:
        parts, since = params[0], params[1]
        assert set(parts) <= share
        assert None not in since
    active = [j for j in [*jobs, *added] if j.partition in share and j.id != mine[0].id]
    assert all(j.id in b.heap for j in active)
    assert len(b.heap) == len(active)
    assert mine[0].id not in b.heap
    a.shutdown()
    b.shutdown()


def test_a_stopping_node_hands_over_once_the_survivor_has_loaded_its_partitions(
    redis_client: redis.Redis,
) -> None:
    """SIGTERM: the stopping node marks itself and keeps its partitions; the survivor loads
    their due entries and answers; only then are the keys handed over, and the survivor's
    takeover reads only what lies past the horizon it loaded."""
    tenant = tenant_factory()
    jobs = [
        job_factory(tenant, interval=timedelta(seconds=10), anchor_at=T0 + timedelta(seconds=5))
        for _ in range(30)
    ]
    a, b = _two_nodes_split()
    partitions = a.config.partitions
    split = _owners(redis_client, partitions)
    b_share = frozenset(b.leases)
    b_jobs = {j.id for j in jobs if j.partition in b_share}
    assert b_jobs
    assert not b_jobs & a.staged_jobs()

    b.ownership.announce_leaving()
    assert not b.ownership.successors_ready()  # node-a has not answered yet
    _hear(a)
    a.tick()
    # node-a holds b's due entries, loaded while node-b still owns and serves every key.
    assert b_jobs <= a.staged_jobs()
    assert frozenset(a.leases) == frozenset(range(partitions)) - b_share
    assert _owners(redis_client, partitions) == split
    assert b.ownership.successors_ready()

    b.shutdown()  # the hand-over
    assert _owners(redis_client, partitions) == dict.fromkeys(range(partitions), "node-a")
    _hear(a)
    queries: list[list[Any]] = []
    with connection.execute_wrapper(_horizon_queries(queries)):
        a.tick()
    assert sorted(a.leases) == list(range(partitions))
    # The takeover read only the difference: every partition of a horizon query has a lower
    # bound (a full load has none).
    assert queries
    for params in queries:
        assert None not in params[1]
    assert all(j.id in a.heap for j in jobs)
    a.shutdown()


def test_a_stopping_node_whose_survivor_does_not_answer_still_hands_over(
    redis_client: redis.Redis,
) -> None:
    """A survivor that never answers (dead, or too busy) delays the stop by leave_wait_s
    on the stopping node's clock, no longer; the keys are then handed over as before."""
    a, b = _two_nodes_split()
    partitions = a.config.partitions
    # Its pauses are the fake clock's sleeps, in steps a float adds exactly (with 0.05 s, the
    # 0.5 s timer poll fell 1e-13 s short and the fake clock stood still).
    b.feed = None
    b.config = replace(b.config, leave_poll_s=1 / 16)
    started = b.clock.monotonic()
    assert b.leave_when_ready() is False  # node-a never ticks
    assert b.clock.monotonic() - started >= b.config.leave_wait_s
    b.shutdown()
    assert _owners(redis_client, partitions) == dict.fromkeys(range(partitions), "node-a")
    _hear(a)
    a.tick()
    assert sorted(a.leases) == list(range(partitions))
    a.shutdown()


def test_a_membership_message_heard_mid_claim_ends_the_claim_loop(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-over (or a node asking for one) announced while a backlog drains is served by
    the next tick's rebalance, not after the claim loop's whole time bound."""
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(seconds=60), anchor_at=T0) for _ in range(20)]
    clock = FakeClock(T0 + timedelta(seconds=60))  # every job's first firing
    a = make_engine(clock, node_id="node-a", claim_batch=5)
    a.feed = ChangeFeed(redis.Redis.from_url(a.config.redis_url))
    announced: list[int] = []

    def commit_then_announce(*args: Any, **kwargs: Any) -> Any:
        result = commit_claim(*args, **kwargs)
        if not announced:
            announced.append(1)
            RedisLeaseStore(redis_client).announce("node-b")
            _hear(a)  # delivered before the loop looks again
        return result

    monkeypatch.setattr("beat_engine.engine.commit_claim", commit_then_announce)
    a.tick()  # takes every partition, loads them, claims the first batches
    assert announced
    first = JobRun.objects.filter(job__in=jobs).count()
    assert 0 < first < len(jobs)
    # The fake clock stands still, so only the message ended the loop; the next tick
    # rebalances, then claims the rest.
    a.tick()
    assert JobRun.objects.filter(job__in=jobs).count() == len(jobs)
    a.shutdown()


def test_a_key_handed_to_a_node_whose_target_lacks_it_is_passed_on(
    redis_client: redis.Redis,
) -> None:
    """Two nodes that saw different live nodes: node-a's partition handed to node-b, whose
    target does not include it. node-b hands it on at its next rebalance, and node-a takes it
    back, instead of the key lasting a TTL with nobody serving it; a key handed to a node
    that stops before taking it is handed on too."""
    a, b = _two_nodes_split()
    partition = min(a.leases)
    moved = RedisLeaseStore(redis_client).transfer({partition: "node-b"}, "node-a", 60_000)
    assert moved == [partition]

    b.ownership.rebalance_soon()
    b.tick()
    assert partition not in b.leases
    assert _owners(redis_client, a.config.partitions)[partition] == "node-a"
    a.ownership.rebalance_soon()
    a.tick()  # its renewal extends the key, handed back to it
    assert partition in a.leases

    # Handed to node-b again, which stops before it takes it: passed back on its way out.
    RedisLeaseStore(redis_client).transfer({partition: "node-b"}, "node-a", 60_000)
    b.shutdown()
    owners = _owners(redis_client, a.config.partitions)
    assert owners == dict.fromkeys(range(a.config.partitions), "node-a")
    a.shutdown()


def test_a_survivor_that_hears_the_hand_over_mid_shutdown_keeps_the_keys(
    redis_client: redis.Redis,
) -> None:
    """The survivor may rebalance between the stopping node's hand-over and the rest of its
    shutdown: the stopping node is out of the registry by then, so the survivor takes the keys
    rather than passing them back to a node that will never take them."""
    a, b = _two_nodes_split()
    partitions = a.config.partitions
    assert b.leases
    store = b.ownership.store
    transfer = store.transfer
    live_at_hand_over: list[list[str]] = []

    def transfer_then_survivor_ticks(targets: dict[int, str], node: str, ttl_ms: int) -> list[int]:
        moved = transfer(targets, node, ttl_ms)
        live_at_hand_over.append(store.live_nodes())
        a.ownership.rebalance_soon()
        a.tick()  # node-a hears the hand-over before node-b's shutdown has finished
        return moved

    store.transfer = transfer_then_survivor_ticks  # type: ignore[method-assign]
    b.shutdown()
    assert live_at_hand_over
    assert all("node-b" not in live for live in live_at_hand_over)
    assert _owners(redis_client, partitions) == dict.fromkeys(range(partitions), "node-a")
    a.tick()
    assert sorted(a.leases) == list(range(partitions))
    a.shutdown()
