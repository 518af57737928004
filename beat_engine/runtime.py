"""Wiring for a real node: Redis clients, the database clock, structured logs."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import redis

from beat_engine.clock import Clock, SystemClock
from beat_engine.config import EngineConfig
from beat_engine.db_clock import DatabaseClock
from beat_engine.engine import BeatEngine
from beat_engine.notifications import ChangeFeed
from beat_engine.publisher import Publisher
from beat_engine.redis_leases import RedisLeaseStore

# Attributes every LogRecord has; anything else came from ``extra=`` and is printed.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: event name plus the ``extra`` fields, for machines and tests."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "event": record.getMessage(),
        }
        data.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


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
