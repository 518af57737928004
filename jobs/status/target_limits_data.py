"""The overview's per-target rate limits panel: each limited target in scope, its configured
rate and burst, the rate its bucket holds now (lowered after a 429/503), and how often its runs
were held back over the last hour.

Bounded: at most SHOWN rows, one statement for the rows and their reasons of the hour (the
reasons counted through their time index), one Redis pipeline for the buckets (HMGET of two
fields each). The current rate is read, never taken: a look at the page changes no bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import connection

from jobs.models_reasons import ReasonKind
from jobs.models_target_limits import EVERY_HOST
from jobs.target_limits import KEY_PREFIX, current_factor
from scheduler_project.redis_urls import redis_from_url

SHOWN = 50

# The reasons' detail starts with "target <name>:" (deferred) or "HTTP <status> from target
# <name>:" (throttled), written by jobs/services/target_waits.py.
_SQL = f"""
SELECT l.tenant_id, t.name, l.target, l.rate_per_s, l.burst,
       (SELECT coalesce(sum(d.count), 0) FROM jobs_decisionreason d
         WHERE d.tenant_id = l.tenant_id AND d.updated_at >= %s
           AND d.kind IN ('{ReasonKind.DEFERRED_TARGET_LIMIT.value}',
                          '{ReasonKind.THROTTLED_BY_TARGET.value}')
           AND (d.detail LIKE 'target ' || l.target || ':%%'
                OR d.detail LIKE 'HTTP %% from target ' || l.target || ':%%'))
  FROM jobs_targetlimit l JOIN jobs_tenant t ON t.id = l.tenant_id
 WHERE true {{tenant}}
 ORDER BY t.name, l.target
 LIMIT {SHOWN}
"""


@dataclass(frozen=True)
class TargetRow:
    tenant: str
    target: str
    rate: float
    burst: int
    # The rate the bucket holds now; None when it cannot be told (no bucket yet: the
    # configured rate; Redis unreachable: unknown).
    current: float | None
    held_last_hour: int

    @property
    def lowered(self) -> bool:
        return self.current is not None and self.current < self.rate * 0.999


def target_limits(*, tenant_id: int | None, now: datetime) -> list[TargetRow]:
    clause, params = ("AND l.tenant_id = %s", [tenant_id]) if tenant_id is not None else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(_SQL.replace("{tenant}", clause), [now - timedelta(hours=1), *params])
        rows = cursor.fetchall()
    factors = _factors([f"{row[0]}:{row[2]}" for row in rows])
    return [
        TargetRow(
            tenant=name,
            target=target,
            rate=rate,
            burst=burst,
            # The wildcard row has a bucket per host, none of its own name.
            current=None
            if target == EVERY_HOST or factors is None
            else rate * factors.get(f"{tenant}:{target}", 1.0),
            held_last_hour=int(held),
        )
        for (tenant, name, target, rate, burst, held) in rows
    ]


def _factors(keys: list[str]) -> dict[str, float] | None:
    """The share of its configured rate each bucket holds now; None if Redis did not answer."""
    if not keys:
        return {}
    try:
        client = redis_from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(KEY_PREFIX + key, "factor", "cool_until")
        replies = pipe.execute()
        (now_s, now_us) = client.time()
    except redis.RedisError:
        return None
    now_ms = now_s * 1000 + now_us // 1000
    return {
        key: current_factor(reply[0], reply[1], now_ms=now_ms)
        for key, reply in zip(keys, replies, strict=True)
    }
