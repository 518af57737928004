"""Counters shared by every process (web, beat, worker), kept in one Redis hash.

Each process increments; the web's /metrics renders the hash in Prometheus text format, so a
counter survives the process that bumped it and needs no per-process scraping.
"""

from __future__ import annotations

import logging

import redis

from jobs.notify import redis_client

logger = logging.getLogger(__name__)

COUNTERS_KEY = "sched:metrics:counters"


def _field(name: str, labels: dict[str, str] | None) -> str:
    if not labels:
        return name
    rendered = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{rendered}}}"


def counter_inc(name: str, amount: int = 1, labels: dict[str, str] | None = None) -> None:
    """Add ``amount`` to a counter; a Redis outage loses the increment, never the work."""
    try:
        redis_client().hincrby(COUNTERS_KEY, _field(name, labels), amount)
    except redis.RedisError:
        logger.warning("metrics.increment_failed", extra={"metric": name}, exc_info=True)


def counters() -> dict[str, int]:
    raw = redis_client().hgetall(COUNTERS_KEY)
    return {key.decode(): int(value) for key, value in raw.items()}
