"""A joining node takes its share when it asks, not at the owners' next renewal; node ids.

The fake clock never moves in the hand-over test: every partition changes hands on the change
feed's announcements alone, with a new epoch (no stale fence, docs/architecture.md, Invariants).
"""

from __future__ import annotations

import socket

import pytest
import redis

from beat_engine.config import EngineConfig, default_node_id
from beat_engine.engine import BeatEngine
from beat_engine.lease_keys import lease_key
from beat_engine.notifications import ChangeFeed
from beat_engine.partitions import assign_partitions
from beat_engine.redis_leases import RedisLeaseStore
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _with_feed(engine: BeatEngine) -> BeatEngine:
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    return engine


def _owners(client: redis.Redis, partitions: int) -> dict[int, str]:
    values = client.mget([lease_key(p) for p in range(partitions)])
    return {p: v.decode() for p, v in enumerate(values) if v is not None}


def test_a_joining_node_is_handed_its_share_at_the_owners_next_tick(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    a = _with_feed(make_engine(clock, node_id="node-a"))
    a.tick()
    partitions = a.config.partitions
    assert sorted(a.leases) == list(range(partitions))
    a_epochs = {p: lease.epoch for p, lease in a.leases.items()}

    b = _with_feed(make_engine(clock, node_id="node-b"))
    b.tick()  # registers, asks: every partition of its share is still node-a's
    fair = assign_partitions(partitions, ["node-a", "node-b"])
    assert b.leases == {}
    assert b.ownership.waiting_for == fair["node-b"]

    assert a.feed is not None
    assert b.feed is not None
    a.feed.wait(5.0)  # node-b's announcement
    b.feed.wait(5.0)  # node-b hears its own: read it, so the next wait is for node-a's
    b.feed.drain()
    a.tick()  # no renewal is due (the clock stands still): the announcement alone moves them
    assert set(a.leases) == fair["node-a"]
    b.feed.wait(5.0)  # node-a's announcement of the release
    b.tick()
    assert set(b.leases) == fair["node-b"]
    assert b.ownership.waiting_for == frozenset()
    assert all(lease.epoch > a_epochs[p] for p, lease in b.leases.items())
    expected = {p: n for n, parts in fair.items() for p in parts}
    assert _owners(redis_client, partitions) == expected
    a.shutdown()
    b.shutdown()


def test_a_node_id_is_taken_by_one_live_process_at_a_time(redis_client: redis.Redis) -> None:
    first = RedisLeaseStore(redis.Redis.from_url(EngineConfig.from_settings().redis_url))
    second = RedisLeaseStore(redis.Redis.from_url(EngineConfig.from_settings().redis_url))
    assert first.claim_node_id("host-0", 10_000) is None
    assert first.claim_node_id("host-0", 10_000) is None  # its own claim, renewed
    holder = second.claim_node_id("host-0", 10_000)
    assert holder is not None
    assert socket.gethostname() in holder
    first.heartbeat("host-0", 10_000)
    assert second.claim_node_id("host-0", 10_000) == holder
    first.leave("host-0")  # a graceful stop frees the id at once
    assert second.claim_node_id("host-0", 10_000) is None
    assert first.claim_node_id("host-0", 10_000) is not None


def test_the_default_node_id_is_the_host_and_slot_and_survives_a_restart() -> None:
    assert default_node_id(2) == f"{socket.gethostname()}-2"
    assert EngineConfig.from_settings().node_id == f"{socket.gethostname()}-0"
    assert EngineConfig.from_settings(slot=3).node_id == f"{socket.gethostname()}-3"
    assert EngineConfig.from_settings(node_id="x", slot=3).node_id == "x"
