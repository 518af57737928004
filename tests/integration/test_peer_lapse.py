"""A node looks at the registry again when another node's registration would run out, not at
its own next renewal, so a dead node's partitions are taken within the TTL of its last renewal
(beat_engine/ownership.py, ``_peer_lapse_mono``), and their overdue firings are claimed and
pushed before the taker's own backlog (beat_engine/engine.py, ``_take_over``); against real
Redis and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from beat_engine.partitions import assign_partitions
from beat_engine.redis_leases import RedisLeaseStore
from jobs.models import Job
from tests.support.beat_nodes import broker_messages, make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The other node's registration has this long left: it renewed a TTL minus this ago and died.
LEFT_MS = 400


def test_a_dead_nodes_share_is_taken_when_its_registration_runs_out(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    engine = make_engine(clock, node_id="node-a")
    own = engine.ownership
    other = RedisLeaseStore(redis.Redis.from_url(engine.config.redis_url))
    other.heartbeat("node-b", LEFT_MS)

    own.maintain(clock.monotonic())
    half = len(own.leases)
    assert 0 < half < engine.config.partitions  # node-b's share is left to node-b
    # The next look is at node-b's lapse (plus the margin), well before a renewal period.
    wait = own.next_due_mono - clock.monotonic()
    assert wait <= LEFT_MS / 1000 + engine.config.peer_lapse_margin_s
    assert wait < engine.config.lease_renew_s

    # Nothing renews node-b: at that look its share is free and taken.
    wait_until(lambda: "node-b" not in other.live_nodes(), what="node-b's registration to lapse")
    clock.advance(timedelta(seconds=wait))
    gained, _lost = own.maintain(clock.monotonic())
    assert len(gained) == engine.config.partitions - half
    assert len(own.leases) == engine.config.partitions
    # Alone now: back to looking once a renewal period.
    assert own.next_due_mono - clock.monotonic() == pytest.approx(engine.config.lease_renew_s)
    engine.shutdown()


def test_a_live_node_costs_no_extra_look(redis_client: redis.Redis) -> None:
    clock = FakeClock(T0)
    engine = make_engine(clock, node_id="node-a")
    other = RedisLeaseStore(redis.Redis.from_url(engine.config.redis_url))
    # Renewed just now for a whole TTL, as a live node is at every renewal.
    other.heartbeat("node-b", engine.config.lease_ttl_ms)
    engine.ownership.maintain(clock.monotonic())
    wait = engine.ownership.next_due_mono - clock.monotonic()
    assert wait == pytest.approx(engine.config.lease_renew_s)
    engine.shutdown()


def test_a_dead_nodes_overdue_firings_go_out_before_the_takers_own_backlog(
    redis_client: redis.Redis,
) -> None:
    # One claim batch per tick, so node-a carries its own backlog from tick to tick.
    clock = FakeClock(T0)
    engine = make_engine(clock, node_id="node-a", claim_batch=5, max_claims_per_tick=5)
    other = RedisLeaseStore(redis.Redis.from_url(engine.config.redis_url))
    share_b = assign_partitions(engine.config.partitions, ["node-a", "node-b"])["node-b"]
    tenant = tenant_factory()
    own: list[Job] = []
    dead: list[Job] = []
    while len(own) < 20 or len(dead) < 4:
        job = job_factory(tenant, interval=timedelta(hours=1))
        mine = job.partition not in share_b
        if (mine and len(own) < 20) or (not mine and len(dead) < 4):
            (own if mine else dead).append(job)
        else:
            job.delete()
    # node-a's 20 are due first; node-b's 4 fell due later, while node-b was dying.
    Job.objects.filter(id__in=[j.id for j in own]).update(next_fire_at=T0)
    Job.objects.filter(id__in=[j.id for j in dead]).update(
        next_fire_at=T0 + timedelta(milliseconds=500)
    )

    other.heartbeat("node-b", LEFT_MS)
    engine.tick()  # node-a's share: 5 of its 20 claimed, the next 5 carried over
    assert len(engine.leases) == engine.config.partitions - len(share_b)
    assert len(broker_messages(redis_client)) == 5
    wait_until(lambda: "node-b" not in other.live_nodes(), what="node-b's registration to lapse")
    clock.advance(timedelta(seconds=1))
    engine.tick()  # takes node-b's share

    assert len(engine.leases) == engine.config.partitions
    pushed = [m["headers"]["sched_partition"] for m in broker_messages(redis_client)[5:]]
    # node-b's overdue firings went out first, then node-a's own backlog went on.
    assert [p in share_b for p in pushed] == [True] * 4 + [False] * (len(pushed) - 4)
    assert len(pushed) > 4
    engine.shutdown()
