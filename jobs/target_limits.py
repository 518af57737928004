"""Per-target token buckets shared by every worker, in Redis (docs/limits.md, "Per-target rate
limits").

Which bucket a run takes a token from is decided here from the job's fields and its tenant's
``TargetLimit`` rows, which each worker process keeps in memory and re-reads every
``TARGET_LIMITS_REFRESH_S``: a run whose tenant has no row and whose job sets no rate of its
own costs one dict lookup, no Redis round trip. A bucket is one Redis hash; taking a token,
and lowering the rate after a 429/503, are each one Lua script, so two workers can never both
take the last token (Redis runs a script alone). The scripts read Redis's own clock: every
worker sharing a bucket then refills it on one clock, and no worker's clock error can mint
tokens.

Adaptive rate: a 429 or 503 from a limited target halves the bucket's rate (at most once per
``ADAPT_HOLD_MS``, so the answers of one burst count once), down to ``TARGET_MIN_FACTOR`` of
the configured rate, and holds it for ``TARGET_COOLDOWN_S``; then the rate doubles every
``TARGET_RECOVERY_S`` until it is back. A Retry-After on the answer empties the bucket until
then. A run the bucket refuses is told when to look again: the refused runs of one bucket get
instants one token apart (the bucket's ``cursor``), so they come back spread at the rate the
target can take, not together.

Redis is a hint (docs/architecture.md, Invariants): a bucket lost with Redis comes back full
(one burst more, never a lost run), and when Redis does not answer the run goes ahead rather
than waiting on it.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from prometheus_client import Counter, Gauge

from beat_engine.clock import Clock, SystemClock
from jobs.models import TargetKind
from jobs.models_target_limits import EVERY_HOST, TargetLimit
from scheduler_project.redis_urls import redis_from_url

if TYPE_CHECKING:
    from jobs.targets import TargetSpec

logger = logging.getLogger(__name__)

KEY_PREFIX = "scheduler:target-bucket:"
# A quiet bucket's hash expires after this; it comes back full, which a quiet target is anyway.
_IDLE_TTL_MS = 3_600_000
# The answers to one burst of requests (all in flight when the target started refusing) lower
# the rate once, not once per answer.
ADAPT_HOLD_MS = 1000
_REDIS_TIMEOUT_S = 2.0

RUNS_HELD = Counter(
    "scheduler_target_runs_held_total",
    "Runs held back by their target's rate limit (waiting, no attempt spent), by tenant, "
    "target and why: the bucket was empty (limit) or the target answered 429/503 (throttled).",
    ["tenant", "target", "reason"],
)
TARGET_RATE = Gauge(
    "scheduler_target_rate_per_second",
    "A limited target's current rate (tokens per second) as its bucket last reported it: the "
    "configured rate, or less while a 429/503 holds it lowered.",
    ["tenant", "target"],
    multiprocess_mode="mostrecent",
)
TARGET_LIMIT_ERRORS = Counter(
    "scheduler_target_limit_errors_total",
    "Bucket operations that failed (Redis unreachable); the run went ahead unlimited.",
)

# KEYS[1]: the bucket. ARGV: rate/s, burst, min factor, recovery ms, idle ttl ms, now ms (a
# negative value: Redis's clock). The factor recovers lazily: f0 * 2^((now - cool_until) /
# recovery) past the cool-down, read on each call, so no process has to tick it back up.
_COMMON_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local min_factor = tonumber(ARGV[3])
local recovery = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'factor', 'cool_until', 'blocked_until',
                     'cursor', 'halved_at')
local factor = tonumber(h[3]) or 1
local cool_until = tonumber(h[4]) or 0
if factor < 1 and now > cool_until then
  factor = math.min(1, factor * 2 ^ ((now - cool_until) / recovery))
end
factor = math.max(min_factor, factor)
local r = rate * factor
local b = math.max(1, burst * factor)
local tokens = tonumber(h[1])
local ts = tonumber(h[2]) or now
if tokens == nil then tokens = b end
if now > ts then
  tokens = tokens + (now - ts) / 1000 * r
  ts = now
end
tokens = math.min(b, tokens)
local blocked_until = tonumber(h[5]) or 0
local cursor = tonumber(h[6]) or 0
local halved_at = tonumber(h[7]) or -1e15
"""

TAKE_LUA = (
    _COMMON_LUA
    + """
local allowed = 0
local wait = 0
if now >= blocked_until and tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  -- Refused: the earliest instant a token is there, and after the instants already handed to
  -- the runs refused before this one, one token apart.
  local ready = math.max(blocked_until, now + math.max(0, 1 - tokens) / r * 1000)
  local slot = math.max(ready, cursor)
  cursor = slot + 1000 / r
  wait = math.ceil(slot - now)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts),
           'cursor', tostring(cursor))
redis.call('PEXPIRE', KEYS[1], ttl)
return {allowed, wait, tostring(r)}
"""
)

# ARGV[7]: cool-down ms, ARGV[8]: Retry-After ms (0: none), ARGV[9]: hold ms.
PENALIZE_LUA = (
    _COMMON_LUA
    + """
local cooldown = tonumber(ARGV[7])
local retry_after = tonumber(ARGV[8])
local hold = tonumber(ARGV[9])
if now - halved_at >= hold then
  factor = math.max(min_factor, factor / 2)
  halved_at = now
end
cool_until = math.max(cool_until, now + cooldown)
local b2 = math.max(1, burst * factor)
tokens = math.min(tokens, b2)
if retry_after > 0 and now + retry_after > blocked_until then
  blocked_until = now + retry_after
  tokens = 0
  ts = blocked_until
end
-- The refused run's own turn: after the Retry-After, after the runs already waiting, and a
-- token at the lowered rate from now.
local r2 = rate * factor
local slot = math.max(blocked_until, cursor, now + 1000 / r2)
cursor = slot + 1000 / r2
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts),
           'factor', tostring(factor), 'cool_until', tostring(cool_until),
           'blocked_until', tostring(blocked_until), 'halved_at', tostring(halved_at),
           'cursor', tostring(cursor))
redis.call('PEXPIRE', KEYS[1], math.max(ttl, cool_until - now + ttl))
return {math.ceil(slot - now), tostring(r2)}
"""
)


@dataclass(frozen=True)
class Bucket:
    """The bucket a run takes its token from."""

    # The Redis hash's name after KEY_PREFIX: tenant and target, or the job's own.
    key: str
    tenant_id: int
    # What the metrics and the reasons call it: the host or group name.
    target: str
    rate: float
    burst: int


@dataclass(frozen=True)
class Take:
    allowed: bool
    # When refused: seconds until this run's turn.
    wait_s: float
    # The bucket's current rate (lowered while a 429/503 holds it down).
    rate: float


def target_key(spec: TargetSpec) -> str:
    """The job's group, else its HTTP host (lower case); empty when it has neither."""
    if spec.group:
        return spec.group
    if spec.kind != TargetKind.HTTP:
        return ""
    try:
        return (urlsplit(spec.url).hostname or "").lower()
    except ValueError:
        return ""


class LimitCache:
    """Tenant id -> {target: (rate, burst)} for tenants with any TargetLimit row, re-read
    every ``refresh_s`` on the monotonic clock (so a change reaches the workers within it)."""

    def __init__(self, *, clock: Clock | None = None, refresh_s: float | None = None) -> None:
        self._clock = clock or SystemClock()
        self._refresh_s = refresh_s
        self._limits: dict[int, dict[str, tuple[float, int]]] = {}
        self._next_read = float("-inf")
        self._lock = threading.Lock()

    def _interval(self) -> float:
        if self._refresh_s is not None:
            return self._refresh_s
        return float(settings.SCHEDULER["TARGET_LIMITS_REFRESH_S"])

    def of_tenant(self, tenant_id: int) -> dict[str, tuple[float, int]] | None:
        if self._clock.monotonic() >= self._next_read:
            self.reload()
        return self._limits.get(tenant_id)

    def reload(self) -> None:
        with self._lock:
            limits: dict[int, dict[str, tuple[float, int]]] = {}
            rows = TargetLimit.objects.values_list("tenant_id", "target", "rate_per_s", "burst")
            for tenant_id, target, rate, burst in rows:
                limits.setdefault(tenant_id, {})[target] = (float(rate), int(burst))
            self._limits = limits
            self._next_read = self._clock.monotonic() + self._interval()


_cache = LimitCache()


def bucket_for(
    spec: TargetSpec, *, tenant_id: int, job_id: object, cache: LimitCache | None = None
) -> Bucket | None:
    """The bucket of a run's target, None when it has no limit (the common case, kept cheap)."""
    if spec.rate is not None:
        # The job's own rate: a bucket of its own, in place of its tenant's for the target.
        name = target_key(spec) or "job"
        return Bucket(f"job:{job_id}", tenant_id, name, spec.rate, spec.burst or 1)
    limits = (cache or _cache).of_tenant(tenant_id)
    if limits is None:
        return None
    name = target_key(spec)
    if not name:
        return None
    limit = limits.get(name)
    if limit is None and not spec.group and spec.kind == TargetKind.HTTP:
        limit = limits.get(EVERY_HOST)
    if limit is None:
        return None
    return Bucket(f"{tenant_id}:{name}", tenant_id, name, limit[0], limit[1])


def current_factor(factor: bytes | None, cool_until: bytes | None, *, now_ms: int) -> float:
    """The share of its configured rate a bucket holds at ``now_ms`` (Redis's clock), from its
    stored ``factor`` and ``cool_until``: the scripts' lazy recovery, for a reader that must
    not take a token (the status page)."""
    conf = settings.SCHEDULER
    share = float(factor) if factor is not None else 1.0
    until = float(cool_until) if cool_until is not None else 0.0
    if share < 1 and now_ms > until:
        periods = (now_ms - until) / (float(conf["TARGET_RECOVERY_S"]) * 1000)
        share = min(1.0, share * 2 ** min(periods, 64.0))
    return max(float(conf["TARGET_MIN_FACTOR"]), share)


class BucketStore:
    """The two scripts against one Redis client, made on first use in the process that uses it
    (a client made before a fork must not be shared by the pool's children)."""

    def __init__(self, client: redis.Redis[bytes] | None = None) -> None:
        self._client = client
        self._pid = os.getpid() if client is not None else 0
        self._scripts: dict[str, Any] = {}

    def _script(self, name: str, source: str) -> Any:
        if self._client is None or self._pid != os.getpid():
            self._client = redis_from_url(
                settings.REDIS_URL,
                socket_timeout=_REDIS_TIMEOUT_S,
                socket_connect_timeout=_REDIS_TIMEOUT_S,
            )
            self._pid = os.getpid()
            self._scripts = {}
        if name not in self._scripts:
            self._scripts[name] = self._client.register_script(source)
        return self._scripts[name]

    def _common(self, bucket: Bucket, now_ms: int | None) -> list[Any]:
        conf = settings.SCHEDULER
        return [
            repr(bucket.rate),
            bucket.burst,
            repr(float(conf["TARGET_MIN_FACTOR"])),
            int(float(conf["TARGET_RECOVERY_S"]) * 1000),
            _IDLE_TTL_MS,
            -1 if now_ms is None else now_ms,
        ]

    def take(self, bucket: Bucket, *, now_ms: int | None = None) -> Take:
        """One token, or when to look again. ``now_ms`` only for tests (default: Redis's clock)."""
        try:
            allowed, wait_ms, rate = self._script("take", TAKE_LUA)(
                keys=[KEY_PREFIX + bucket.key], args=self._common(bucket, now_ms)
            )
        except redis.RedisError:
            logger.warning("target_limit.unavailable", extra={"target": bucket.target})
            TARGET_LIMIT_ERRORS.inc()
            return Take(True, 0.0, bucket.rate)
        current = float(rate)
        TARGET_RATE.labels(tenant=str(bucket.tenant_id), target=bucket.target).set(current)
        return Take(bool(allowed), int(wait_ms) / 1000, current)

    def penalize(
        self, bucket: Bucket, *, retry_after_s: float = 0.0, now_ms: int | None = None
    ) -> Take:
        """The target answered 429/503: lower its rate; the refused run's wait for its turn,
        and the rate now in force."""
        conf = settings.SCHEDULER
        args = [
            *self._common(bucket, now_ms),
            int(float(conf["TARGET_COOLDOWN_S"]) * 1000),
            max(0, int(retry_after_s * 1000)),
            ADAPT_HOLD_MS,
        ]
        try:
            wait_ms, rate = self._script("penalize", PENALIZE_LUA)(
                keys=[KEY_PREFIX + bucket.key], args=args
            )
        except redis.RedisError:
            logger.warning("target_limit.unavailable", extra={"target": bucket.target})
            TARGET_LIMIT_ERRORS.inc()
            return Take(False, max(retry_after_s, 1 / bucket.rate), bucket.rate)
        current = float(rate)
        TARGET_RATE.labels(tenant=str(bucket.tenant_id), target=bucket.target).set(current)
        return Take(False, int(wait_ms) / 1000, current)


store = BucketStore()
