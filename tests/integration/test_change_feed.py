"""The change feed reads past its subscription's confirmations: a drain right after the
feed subscribed still returns the announcements that came in behind them."""

from __future__ import annotations

import pytest
import redis

from beat_engine.clock import SystemClock
from beat_engine.notifications import ChangeFeed
from beat_engine.redis_leases import NODES_CHANNEL
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_a_drain_behind_the_subscription_confirmations_sees_the_announcement(
    redis_client: redis.Redis,
) -> None:
    feed = ChangeFeed(redis.Redis(connection_pool=redis_client.connection_pool))
    try:
        feed.drain()  # subscribes to both channels; their confirmations are on the way
        # Published once Redis counts the feed as a subscriber, so the announcement is queued
        # on the feed's connection behind the two confirmations.
        wait_until(
            lambda: redis_client.pubsub_numsub(NODES_CHANNEL)[0][1] == 1,
            timeout_s=5,
            what="the feed's subscription",
        )
        assert redis_client.publish(NODES_CHANNEL, "node-b") == 1
        SystemClock().sleep(0.3)  # the announcement reaches the feed's socket
        # One drain, as one engine tick does: it must not stop at a confirmation.
        assert feed.drain().nodes_changed
    finally:
        feed.close()
