"""A node looks at the registry again when another node's registration would run out, not at
its own next renewal, so a dead node's partitions are taken within the TTL of its last renewal
(beat_engine/ownership.py, ``_peer_lapse_mono``); against real Redis and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from beat_engine.redis_leases import RedisLeaseStore
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0
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
