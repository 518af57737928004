"""Partition lease values, renewal arithmetic and the LeaseStore protocol."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Lease:
    """A partition held by this node, with its fencing epoch and local deadlines.

    The deadlines are on the node's monotonic clock and start from the instant *before* the
    acquire/extend request was sent, so the node believes its lease ends no later than Redis
    does (Redis counts the TTL from when it received the request).
    """

    partition: int
    node: str
    epoch: int
    renew_at_mono: float
    expires_at_mono: float


def lease_from_grant(
    *, partition: int, node: str, epoch: int, sent_at_mono: float, ttl_s: float, renew_s: float
) -> Lease:
    return Lease(
        partition=partition,
        node=node,
        epoch=epoch,
        renew_at_mono=sent_at_mono + renew_s,
        expires_at_mono=sent_at_mono + ttl_s,
    )


def lease_renewed(lease: Lease, *, sent_at_mono: float, ttl_s: float, renew_s: float) -> Lease:
    return lease_from_grant(
        partition=lease.partition,
        node=lease.node,
        epoch=lease.epoch,
        sent_at_mono=sent_at_mono,
        ttl_s=ttl_s,
        renew_s=renew_s,
    )


def lease_usable(lease: Lease, now_mono: float) -> bool:
    """Whether the node may still claim on this lease by its own reckoning.

    This is an optimisation only: safety comes from the epoch check in PostgreSQL (no stale
    fence, docs/architecture.md), which holds even when this arithmetic is wrong (a paused
    process).
    """
    return now_mono < lease.expires_at_mono


@dataclass(frozen=True)
class LeasePlan:
    acquire: frozenset[int]
    release: frozenset[int]


def plan_leases(*, desired: Iterable[int], held: Iterable[int]) -> LeasePlan:
    """Which partitions to try to take and which to give up, to move from held to desired."""
    want, have = frozenset(desired), frozenset(held)
    return LeasePlan(acquire=want - have, release=have - want)


def next_renewal_mono(leases: Mapping[int, Lease], default_mono: float) -> float:
    return min((lease.renew_at_mono for lease in leases.values()), default=default_mono)


class LeaseStore(Protocol):
    """Where leases and node liveness live (Redis in production). TTLs are in milliseconds."""

    def acquire(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        """Take the leases nobody holds, and those handed to this node; returns those taken."""
        ...

    def transfer(self, targets: dict[int, str], node: str, ttl_ms: int) -> list[int]:
        """Hand each lease this node holds to its target node (partition -> node) in one step,
        the key never absent; returns the partitions moved."""
        ...

    def extend(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        """Extend the leases this node still holds; returns the partitions extended."""
        ...

    def release(self, partitions: list[int], node: str) -> list[int]:
        """Give up leases this node holds; a lease someone else took is left alone."""
        ...

    def owner(self, partition: int) -> str | None: ...

    def heartbeat(self, node: str, ttl_ms: int) -> list[str]:
        """Mark the node alive for ttl_ms and return every live node, sorted."""
        ...

    def expiries(self) -> dict[str, float]:
        """Seconds until each live node's registration runs out, as of the last heartbeat."""
        ...

    def live_nodes(self) -> list[str]:
        """Every live node, sorted, without registering this one."""
        ...

    def leaving(self) -> dict[str, int]:
        """The nodes marked as stopping at the last heartbeat, each with its mark's score (a
        new mark has a new score)."""
        ...

    def mark_leaving(self, node: str, ttl_ms: int) -> None:
        """Mark this node as stopping for ttl_ms, forget earlier answers, and announce it."""
        ...

    def mark_ready(self, leaving: list[str], node: str, ttl_ms: int) -> None:
        """Tell each stopping node in ``leaving`` that this node has loaded what it will take."""
        ...

    def leave_view(self, node: str) -> tuple[list[str], frozenset[str], frozenset[str]]:
        """For a stopping node: the live nodes (sorted), those marked as stopping, and those
        that answered its mark."""
        ...

    def leave(self, node: str) -> None: ...

    def claim_node_id(self, node: str, ttl_ms: int) -> str | None:
        """Take the node id for this process; returns the other live process holding it."""
        ...

    def announce(self, node: str) -> None:
        """Tell every node that membership or ownership changed, so they rebalance now."""
        ...
