"""Wiring for a real node: Redis clients, the database clock (log formats: log_format.py)."""

from __future__ import annotations

import redis

from beat_engine.clock import Clock, SystemClock
from beat_engine.config import EngineConfig
from beat_engine.db_clock import DatabaseClock
from beat_engine.engine import BeatEngine
from beat_engine.log_format import JsonLineFormatter
from beat_engine.notifications import ChangeFeed
from beat_engine.publisher import Publisher
from beat_engine.redis_leases import RedisLeaseStore

__all__ = ["JsonLineFormatter", "build_engine"]


def build_engine(config: EngineConfig, *, clock: Clock | None = None) -> BeatEngine:
    lease_client = redis.Redis.from_url(config.redis_url, socket_timeout=5)
    broker = redis.Redis.from_url(config.broker_url, socket_timeout=10)
    feed = ChangeFeed(redis.Redis.from_url(config.redis_url, socket_timeout=None))
    return BeatEngine(
        config=config,
        clock=clock or DatabaseClock(SystemClock()),
        store=RedisLeaseStore(lease_client),
        publisher=Publisher(broker, origin=config.node_id),
        feed=feed,
    )
