"""Per-tenant request throttling in Redis, shared by every web process."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from jobs.api.auth import TenantPrincipal
from jobs.notify import redis_client

logger = logging.getLogger(__name__)

THROTTLE_KEY = "sched:throttle:{tenant_id}"
_PERIODS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """'600/min' -> (600, 60); None or '' disables throttling."""
    if not rate:
        return None
    count, _, period = rate.partition("/")
    return int(count), _PERIODS_S[period.strip()[:1].lower()]


class TenantRateThrottle(BaseThrottle):
    """A fixed window per tenant: REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["tenant"].

    The window lives in Redis rather than the process-local cache so that N web copies share
    one budget per tenant. If Redis is down the request is allowed: throttling protects
    fairness, and refusing every request would turn a Redis outage into an API outage.
    """

    def __init__(self) -> None:
        self._wait_ms: int | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        principal = request.user
        rates = dict(settings.REST_FRAMEWORK).get("DEFAULT_THROTTLE_RATES")
        rate = parse_rate(rates.get("tenant") if isinstance(rates, dict) else None)
        if rate is None or not isinstance(principal, TenantPrincipal):
            return True
        limit, window_s = rate
        key = THROTTLE_KEY.format(tenant_id=principal.tenant.pk)
        try:
            pipe = redis_client().pipeline(transaction=True)
            # SET NX EX opens the window atomically, so a crash never leaves a key without TTL.
            pipe.set(key, 0, ex=window_s, nx=True)
            pipe.incr(key)
            pipe.pttl(key)
            _, used, ttl_ms = pipe.execute()
        except redis.RedisError:
            logger.warning("api.throttle.redis_unavailable", exc_info=True)
            return True
        if int(used) <= limit:
            return True
        self._wait_ms = max(int(ttl_ms), 0)
        return False

    def wait(self) -> float | None:
        return None if self._wait_ms is None else self._wait_ms / 1000
