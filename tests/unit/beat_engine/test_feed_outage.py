"""The change feed with Redis unreachable: its wait still waits, so the engine's loop pauses."""

from __future__ import annotations

import redis

from beat_engine.notifications import ChangeFeed
from tests.support.clock import FakeClock
from tests.support.metrics import free_port


def test_wait_sleeps_its_timeout_when_redis_refuses_the_subscription() -> None:
    # A port nothing listens on: every connection is refused at once, as while a master fails
    # over. Without the sleep the engine ticked, failed and ticked again hundreds of times a
    # second until the replica was promoted.
    client = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    clock = FakeClock()
    feed = ChangeFeed(client, clock=clock)
    started = clock.monotonic()
    feed.wait(1.0)
    assert clock.monotonic() - started >= 1.0
    assert not feed.drain()
