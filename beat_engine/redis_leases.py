"""RedisLeaseStore: lease keys taken, extended, handed over and released by Lua scripts; live-node
registry."""

from __future__ import annotations

import os
import socket

import redis

from beat_engine.lease_keys import LEASE_KEY, LEAVE_READY_KEY, LEAVING_KEY, NODE_ID_KEY, NODES_KEY

__all__ = ["LEASE_KEY", "NODES_KEY", "RedisLeaseStore"]

# Published when a node joins, leaves or hands partitions over, so the others rebalance at once
# instead of at their next renewal.
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

# Take every lease in KEYS that is free, or that names ARGV[1] already (handed to it by its
# previous owner, TRANSFER_IF_OWNER_LUA); returns the 1-based indexes taken.
ACQUIRE_LUA = """
local taken = {}
for i, key in ipairs(KEYS) do
    local holder = redis.call('GET', key)
    if holder == false then
        redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
        table.insert(taken, i)
    elseif holder == ARGV[1] then
        redis.call('PEXPIRE', key, ARGV[2])
        table.insert(taken, i)
    end
end
return taken
"""

# A hand-over: each lease in KEYS that ARGV[1] still holds now names ARGV[2 + i], its new
# owner, for ARGV[2] ms. The key is replaced, never deleted: at no instant does the partition
# have no owner. Returns the 1-based indexes moved.
TRANSFER_IF_OWNER_LUA = """
local moved = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[1] then
        redis.call('SET', key, ARGV[2 + i], 'PX', ARGV[2])
        table.insert(moved, i)
    end
end
return moved
"""

# Liveness scored by Redis's own clock, so node clocks need not agree: register the node until
# now + ttl, forget nodes whose time ran out, and return the survivors, each with the
# milliseconds left on its registration (when a node that stopped renewing drops out), and the
# nodes marked as stopping (KEYS[2]), each with its mark's score (which names the mark: a node
# that stops again is marked anew).
HEARTBEAT_LUA = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local result = {}
for i = 1, #live, 2 do
    table.insert(result, live[i])
    table.insert(result, tostring(tonumber(live[i + 1]) - now_ms))
end
return {result, redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')}
"""

# A node about to stop (ARGV[1]) marks itself until now + ttl (ARGV[2]) and forgets the answers
# to any earlier mark of its own (KEYS[2]).
MARK_LEAVING_LUA = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('DEL', KEYS[2])
"""

# What a stopping node needs to know whether the nodes taking its partitions are ready: the live
# nodes (KEYS[1]), the nodes marked as stopping (KEYS[2]) and those that answered its mark
# (KEYS[3]), by Redis's clock.
LEAVE_VIEW_LUA = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {
    redis.call('ZRANGEBYSCORE', KEYS[1], now_ms, '+inf'),
    redis.call('ZRANGEBYSCORE', KEYS[2], now_ms, '+inf'),
    redis.call('SMEMBERS', KEYS[3]),
}
"""


# Take the node id for this process (ARGV[1]) unless another live process holds it; returns the
# holder when it is another. The heartbeat keeps it (HEARTBEAT_LUA), leaving deletes it.
CLAIM_NODE_ID_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
    return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""

# The node id's key is refreshed only while it is ours (or gone, after a Redis flush): a
# second process started with the same id never takes it over from a live one.
KEEP_NODE_ID_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
"""

FORGET_NODE_ID_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
end
"""


def _lease_key(partition: int) -> str:
    return LEASE_KEY.format(partition=partition)


class RedisLeaseStore:
    def __init__(self, client: redis.Redis[bytes]) -> None:
        self._client = client
        self._extend = client.register_script(EXTEND_IF_OWNER_LUA)
        self._release = client.register_script(RELEASE_IF_OWNER_LUA)
        self._acquire = client.register_script(ACQUIRE_LUA)
        self._transfer = client.register_script(TRANSFER_IF_OWNER_LUA)
        self._heartbeat = client.register_script(HEARTBEAT_LUA)
        self._claim_node_id = client.register_script(CLAIM_NODE_ID_LUA)
        self._keep_node_id = client.register_script(KEEP_NODE_ID_LUA)
        self._forget_node_id = client.register_script(FORGET_NODE_ID_LUA)
        self._mark_leaving = client.register_script(MARK_LEAVING_LUA)
        self._leave_view = client.register_script(LEAVE_VIEW_LUA)
        # Who this process is, for a second process started with the same node id to name.
        self._instance = f"{socket.gethostname()} pid {os.getpid()} {os.urandom(4).hex()}"
        self._node_id_claimed: str | None = None
        # Seconds left on each live node's registration at the last heartbeat.
        self._expiries: dict[str, float] = {}
        # The nodes marked as stopping at the last heartbeat, each with its mark's score.
        self._leaving: dict[str, int] = {}

    def acquire(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        if not partitions:
            return []
        hits = self._acquire(keys=[_lease_key(p) for p in partitions], args=[node, ttl_ms])
        return [partitions[int(i) - 1] for i in hits]

    def transfer(self, targets: dict[int, str], node: str, ttl_ms: int) -> list[int]:
        if not targets:
            return []
        parts = sorted(targets)
        hits = self._transfer(
            keys=[_lease_key(p) for p in parts], args=[node, ttl_ms, *(targets[p] for p in parts)]
        )
        return [parts[int(i) - 1] for i in hits]

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

    def claim_node_id(self, node: str, ttl_ms: int) -> str | None:
        """Take ``node`` for this process; returns the live process holding it, if another."""
        holder = self._claim_node_id(
            keys=[NODE_ID_KEY.format(node=node)], args=[self._instance, ttl_ms]
        )
        if holder:
            return bytes(holder).decode()
        self._node_id_claimed = node
        return None

    def heartbeat(self, node: str, ttl_ms: int) -> list[str]:
        if self._node_id_claimed == node:
            self._keep_node_id(keys=[NODE_ID_KEY.format(node=node)], args=[self._instance, ttl_ms])
        flat, leaving = self._heartbeat(keys=[NODES_KEY, LEAVING_KEY], args=[node, ttl_ms])
        self._expiries = {
            bytes(flat[i]).decode(): float(flat[i + 1]) / 1000 for i in range(0, len(flat), 2)
        }
        self._leaving = {
            bytes(leaving[i]).decode(): int(float(leaving[i + 1]))
            for i in range(0, len(leaving), 2)
        }
        return sorted(self._expiries)

    def expiries(self) -> dict[str, float]:
        return dict(self._expiries)

    def leaving(self) -> dict[str, int]:
        return dict(self._leaving)

    def mark_leaving(self, node: str, ttl_ms: int) -> None:
        self._mark_leaving(
            keys=[LEAVING_KEY, LEAVE_READY_KEY.format(node=node)], args=[node, ttl_ms]
        )
        self.announce(node)

    def mark_ready(self, leaving: list[str], node: str, ttl_ms: int) -> None:
        if not leaving:
            return
        pipe = self._client.pipeline(transaction=False)
        for other in leaving:
            key = LEAVE_READY_KEY.format(node=other)
            pipe.sadd(key, node)
            pipe.pexpire(key, ttl_ms)
        pipe.execute()

    def leave_view(self, node: str) -> tuple[list[str], frozenset[str], frozenset[str]]:
        live, leaving, ready = self._leave_view(
            keys=[NODES_KEY, LEAVING_KEY, LEAVE_READY_KEY.format(node=node)]
        )
        return (
            sorted(bytes(m).decode() for m in live),
            frozenset(bytes(m).decode() for m in leaving),
            frozenset(bytes(m).decode() for m in ready),
        )

    def live_nodes(self) -> list[str]:
        """Nodes registered until after Redis's current time, without registering one."""
        seconds, micros = self._client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        members = self._client.zrangebyscore(NODES_KEY, now_ms, "+inf")
        return sorted(bytes(m).decode() for m in members)

    def leave(self, node: str) -> None:
        pipe = self._client.pipeline(transaction=False)
        pipe.zrem(NODES_KEY, node)
        pipe.zrem(LEAVING_KEY, node)
        pipe.delete(LEAVE_READY_KEY.format(node=node))
        pipe.execute()
        if self._node_id_claimed == node:
            self._forget_node_id(keys=[NODE_ID_KEY.format(node=node)], args=[self._instance])
            self._node_id_claimed = None
        self.announce(node)

    def announce(self, node: str) -> None:
        self._client.publish(NODES_CHANNEL, node)
