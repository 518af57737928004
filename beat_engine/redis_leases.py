"""RedisLeaseStore: SET NX PX leases, extend/release-if-owner scripts, live-node registry."""

from __future__ import annotations

import redis

from beat_engine.lease_keys import LEASE_KEY, NODES_KEY

__all__ = ["LEASE_KEY", "NODES_KEY", "RedisLeaseStore"]

# Published when a node leaves, so the others rebalance at once instead of at their next renewal.
NODES_CHANNEL = "sched:nodes:changed"

# Extend every lease in KEYS that ARGV[1] still holds; returns the 1-based indexes extended.
# One script for all partitions: one round trip per renewal, and no lease can be extended after
# another node took it (the GET and PEXPIRE run atomically).
EXTEND_IF_OWNER_LUA = """
local extended = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        redis.call('PEXPIRE', key, ARGV[2])
        table.insert(extended, i)
    end
end
return extended
"""

RELEASE_IF_OWNER_LUA = """
local released = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        redis.call('DEL', key)
        table.insert(released, i)
    end
end
return released
"""

# Liveness scored by Redis's own clock, so node clocks need not agree: register the node until
# now + ttl, forget nodes whose time ran out, and return the survivors.
HEARTBEAT_LUA = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""


def _lease_key(partition: int) -> str:
    return LEASE_KEY.format(partition=partition)


class RedisLeaseStore:
    def __init__(self, client: redis.Redis[bytes]) -> None:
        self._client = client
        self._extend = client.register_script(EXTEND_IF_OWNER_LUA)
        self._release = client.register_script(RELEASE_IF_OWNER_LUA)
        self._heartbeat = client.register_script(HEARTBEAT_LUA)

    def acquire(self, partition: int, node: str, ttl_ms: int) -> bool:
        return bool(self._client.set(_lease_key(partition), node, nx=True, px=ttl_ms))

    def extend(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        if not partitions:
            return []
        hits = self._extend(keys=[_lease_key(p) for p in partitions], args=[node, ttl_ms])
        return [partitions[int(i) - 1] for i in hits]

    def release(self, partitions: list[int], node: str) -> list[int]:
        if not partitions:
            return []
        hits = self._release(keys=[_lease_key(p) for p in partitions], args=[node])
        return [partitions[int(i) - 1] for i in hits]

    def owner(self, partition: int) -> str | None:
        value = self._client.get(_lease_key(partition))
        return None if value is None else bytes(value).decode()

    def heartbeat(self, node: str, ttl_ms: int) -> list[str]:
        members = self._heartbeat(keys=[NODES_KEY], args=[node, ttl_ms])
        return sorted(bytes(m).decode() for m in members)

    def live_nodes(self) -> list[str]:
        """Nodes registered until after Redis's current time, without registering one."""
        seconds, micros = self._client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        members = self._client.zrangebyscore(NODES_KEY, now_ms, "+inf")
        return sorted(bytes(m).decode() for m in members)

    def leave(self, node: str) -> None:
        self._client.zrem(NODES_KEY, node)
        self._client.publish(NODES_CHANNEL, node)
