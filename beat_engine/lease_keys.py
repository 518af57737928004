"""Where partition leases and the live-node registry live in Redis.

Kept apart from the lease store (beat_engine/redis_leases.py) so that read-only views of
ownership, such as the status pages, can find the keys without importing the engine's adapter.
"""

from __future__ import annotations

# Value: the id of the node holding the partition's lease; expires with the lease (PX).
LEASE_KEY = "sched:lease:{partition}"
# Sorted set: member a node id, score the Redis-clock millisecond its registration expires
# (its last heartbeat plus the lease TTL).
NODES_KEY = "sched:nodes"
# Value: which process (host, pid, random token) runs as this node id; expires with the
# heartbeat, so that a second process started with the same id refuses to run.
NODE_ID_KEY = "sched:node:{node}"
# Sorted set: member a node that is stopping and waits for the nodes taking its partitions to
# load them (docs/engine.md, "Hand-over"), score the Redis-clock millisecond the mark expires.
LEAVING_KEY = "sched:nodes:leaving"
# Set: the nodes that have loaded the partitions they will take from this stopping node.
LEAVE_READY_KEY = "sched:leaving:{node}:ready"


def lease_key(partition: int) -> str:
    return LEASE_KEY.format(partition=partition)
