"""Wiring for a real node: Redis clients, the database clock (log formats: log_format.py)."""

from __future__ import annotations

from beat_engine import gc_pauses
from beat_engine.clock import Clock, SystemClock
from beat_engine.config import EngineConfig
from beat_engine.db_clock import DatabaseClock
from beat_engine.db_session import install_session_limits
from beat_engine.engine import BeatEngine
from beat_engine.log_format import JsonLineFormatter
from beat_engine.notifications import ChangeFeed
from beat_engine.publisher import Publisher
from beat_engine.redis_leases import RedisLeaseStore
from scheduler_project.redis_urls import redis_from_url

__all__ = ["JsonLineFormatter", "build_engine"]


def build_engine(config: EngineConfig, *, clock: Clock | None = None) -> BeatEngine:
    # Plain or Sentinel URLs alike: behind Sentinel each client finds the current master on
    # every reconnect, so after a failover the next tick's calls reach the promoted replica.
    lease_client = redis_from_url(config.redis_url, socket_timeout=5)
    broker = redis_from_url(config.broker_url, socket_timeout=10)
    feed = ChangeFeed(redis_from_url(config.redis_url, socket_timeout=None))
    install_session_limits(config.idle_tx_timeout_s)
    gc_pauses.install()
    return BeatEngine(
        config=config,
        clock=clock or DatabaseClock(SystemClock()),
        store=RedisLeaseStore(lease_client),
        # A staging list outlives its instant by a minute at most (claims ahead are at most
        # the look-ahead early): then it expires, moved or not (beat_engine/broker_staging.py).
        publisher=Publisher(broker, origin=config.node_id, staging_ttl_s=config.lookahead_s + 60.0),
        feed=feed,
    )
