"""Beat nodes as the status pages show them: who is alive, which partitions each holds.

Three sources, each the authority for one thing (docs/engine.md):

* Redis ``sched:nodes`` (beat_engine/lease_keys.py): a node is live while its registration,
  renewed at every heartbeat to Redis's time plus the lease TTL, has not run out; the last
  heartbeat is that expiry minus the TTL.
* Redis ``sched:lease:<p>``: which node holds each partition's lease right now.
* PostgreSQL ``jobs_partitionepoch``: the fencing epoch of each partition and the node that took
  it; ``updated_at`` moves on every claim or timer transaction the owner fences, so it is the
  last time the owner wrote under that epoch (no stale fence, docs/architecture.md, Invariants).

A partition whose lease holder differs from its epoch's owner is between owners (the new
holder takes its epoch right after the lease); one with no holder is unowned and fires nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis

from beat_engine.lease_keys import NODES_KEY, lease_key
from jobs.models import PartitionEpoch


@dataclass
class NodeStatus:
    node: str
    # None for a node that holds leases but whose registration already ran out.
    last_heartbeat: datetime | None
    live: bool
    partitions: list[int] = field(default_factory=list)
    # partition -> epoch, for the partitions whose stored epoch this node took.
    epochs: dict[int, int] = field(default_factory=dict)
    last_fenced_write: datetime | None = None


@dataclass(frozen=True)
class Ownership:
    nodes: list[NodeStatus]
    unowned: list[int]
    # Partitions whose lease holder has not (yet) taken the stored epoch.
    in_handover: list[int]
    partitions: int
    redis_time: datetime


def partition_ranges(parts: list[int]) -> str:
    """0-3, 7, 9-10: a compact spelling of a list of partitions."""
    parts = sorted(parts)
    spans: list[str] = []
    start = prev = None
    for p in parts:
        if start is None:
            start = prev = p
        elif prev is not None and p == prev + 1:
            prev = p
        else:
            spans.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = p
    if start is not None:
        spans.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ", ".join(spans)


def _ms(instant_ms: float) -> datetime:
    return datetime.fromtimestamp(instant_ms / 1000, tz=UTC)


def ownership(client: redis.Redis[bytes], *, partitions: int, lease_ttl_s: float) -> Ownership:
    """One round trip to Redis (TIME, the registry, every lease) and one small table read."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.zrange(NODES_KEY, 0, -1, withscores=True)
    pipe.mget([lease_key(p) for p in range(partitions)])
    (seconds, micros), registry, holders = pipe.execute()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    ttl_ms = lease_ttl_s * 1000
    nodes: dict[str, NodeStatus] = {}
    for member, expires_ms in registry:
        name = bytes(member).decode()
        nodes[name] = NodeStatus(
            node=name, last_heartbeat=_ms(expires_ms - ttl_ms), live=expires_ms > now_ms
        )
    unowned: list[int] = []
    holder_of: dict[int, str] = {}
    for p, holder in enumerate(holders):
        if holder is None:
            unowned.append(p)
            continue
        name = bytes(holder).decode()
        holder_of[p] = name
        nodes.setdefault(name, NodeStatus(node=name, last_heartbeat=None, live=False))
        nodes[name].partitions.append(p)
    in_handover: list[int] = []
    for row in PartitionEpoch.objects.filter(partition__lt=partitions).order_by("partition"):
        holder = holder_of.get(row.partition)
        if holder is None:
            continue
        if row.owner != holder:
            in_handover.append(row.partition)
            continue
        status = nodes[holder]
        status.epochs[row.partition] = row.epoch
        if row.updated_at is not None and (
            status.last_fenced_write is None or row.updated_at > status.last_fenced_write
        ):
            status.last_fenced_write = row.updated_at
    return Ownership(
        nodes=sorted(nodes.values(), key=lambda n: n.node),
        unowned=unowned,
        in_handover=in_handover,
        partitions=partitions,
        redis_time=_ms(now_ms),
    )
