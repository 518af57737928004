"""Which partitions this node holds: heartbeat, rendezvous target, acquire/extend/hand over."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

import redis
from django.db import DatabaseError

from beat_engine.clock import Clock
from beat_engine.config import EngineConfig
from beat_engine.fencing import epochs_hand_over, epochs_take
from beat_engine.leases import (
    Lease,
    LeaseStore,
    lease_from_grant,
    lease_renewed,
    lease_usable,
    plan_leases,
)
from beat_engine.metrics import (
    LEASE_RENEWAL_GAP,
    LEASE_RENEWALS,
    LEASES_ACQUIRED,
    LEASES_LOST,
    PARTITIONS,
    PARTITIONS_OWNED,
    count,
)
from beat_engine.partitions import assign_partitions

logger = logging.getLogger("beat_engine")


class Ownership:
    def __init__(self, *, config: EngineConfig, clock: Clock, store: LeaseStore) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.leases: dict[int, Lease] = {}
        self.next_due_mono = clock.monotonic()
        # Partitions of our target still held by another node: asked for, taken once released.
        self.waiting_for: frozenset[int] = frozenset()
        # Called before partitions are handed over, so that nothing claimed under them is left
        # unmarked for the next owner to send again (the engine flushes its outbox).
        self.before_handover: Callable[[], None] = lambda: None
        # Called with the share this node is about to ask for, before it registers: the
        # engine loads those partitions' horizon while their owners still serve them.
        self.before_join: Callable[[frozenset[int]], None] = lambda share: None
        # Called with the partitions this node will take once the nodes marked as stopping
        # have gone: the engine loads their horizon while those nodes still serve them.
        self.before_peers_leave: Callable[[frozenset[int]], None] = lambda share: None
        self._announced = False
        # This node is stopping (announce_leaving): it loads nothing for other stopping nodes.
        self._leaving = False
        # The stopping nodes (with their marks) whose partitions were loaded and answered.
        self._prepared_for: dict[str, int] = {}
        # The lease keeper (beat_engine/lease_keeper.py) renews from its own thread: it
        # replaces held leases' values under this lock and never adds or removes one, so a
        # lease the engine dropped meanwhile is not brought back.
        self._lock = threading.Lock()
        # When the leases were last extended (by either thread), and when the engine's loop
        # last came round: the keeper renews only while the loop is alive.
        self.renewed_mono = clock.monotonic()
        self.alive_mono = self.renewed_mono
        self._live: list[str] = []
        PARTITIONS.set(config.partitions)

    @property
    def node(self) -> str:
        return self.config.node_id

    def rebalance_soon(self) -> None:
        self.next_due_mono = float("-inf")

    def usable_epochs(self, mono: float) -> dict[int, int]:
        return {p: lease.epoch for p, lease in self.leases.items() if lease_usable(lease, mono)}

    def maintain(self, mono: float) -> tuple[list[int], list[int]]:
        """Heartbeat, renew, rebalance when due; returns (partitions gained, partitions lost)."""
        self.alive_mono = mono
        if mono < self.next_due_mono:
            return [], []
        cfg = self.config
        if not self._announced:
            self._prepare_join()
        sent = self.clock.monotonic()
        live = self.store.heartbeat(self.node, cfg.lease_ttl_ms)
        self._live = live
        if not self._announced:
            # Joining: the owners of our share hand it over at their next tick, not at their
            # next renewal (docs/engine.md, "Hand-over").
            self.store.announce(self.node)
            self._announced = True
        lost = self._renew(sent)
        desired = assign_partitions(cfg.partitions, live).get(self.node, frozenset())
        plan = plan_leases(desired=desired, held=self.leases)
        if plan.release:
            self.before_handover()
        handed = self.hand_over(plan.release, live, reason="rebalance")
        if handed:
            # The nodes now named by their keys take them as soon as they hear it.
            self.store.announce(self.node)
        lost.extend(handed)
        gained = self._acquire(sorted(plan.acquire))
        self._pass_on(desired, live)
        self.waiting_for = frozenset(plan.acquire) - frozenset(gained)
        self.next_due_mono = sent + cfg.lease_renew_s
        if self.waiting_for:
            # Their owner releases them when it hears of us and announces it; should either
            # message be lost, ask again soon rather than a whole renewal period later.
            self.next_due_mono = sent + min(cfg.lease_renew_s, cfg.handover_retry_s)
        self.next_due_mono = min(self.next_due_mono, self._peer_lapse_mono(sent))
        PARTITIONS_OWNED.set(len(self.leases))
        self._prepare_for_leavers(live)
        if gained or lost:
            # One line per rebalance, however many partitions moved: a node starting alone
            # takes all of them (64 by default) and says so once. Each lease's epoch is in
            # the partition_epoch table.
            logger.info(
                "beat.lease.owned",
                extra={
                    "node": self.node,
                    "gained": gained,
                    "lost": sorted(lost),
                    "owned": sorted(self.leases),
                    "live_nodes": live,
                },
            )
        return gained, lost

    def _prepare_for_leavers(self, live: list[str]) -> None:
        """Other nodes marked as stopping (they announce it on SIGTERM and keep serving their
        partitions meanwhile): load the horizon of the partitions this node will hold once
        they have gone, then answer each of them, so that they hand over to a node that can
        claim at once (docs/engine.md, "Hand-over"). Done once per mark."""
        if self._leaving or not self._announced:
            return
        leaving = {n: mark for n, mark in self.store.leaving().items() if n != self.node}
        leaving = {n: mark for n, mark in leaving.items() if n in live}
        if leaving == self._prepared_for:
            return
        if not leaving:
            self._prepared_for = {}
            return
        staying = [n for n in live if n not in leaving]
        after = assign_partitions(self.config.partitions, staying).get(self.node, frozenset())
        share = after - frozenset(self.leases)
        if share:
            self.before_peers_leave(share)
        self.store.mark_ready(sorted(leaving), self.node, self.config.lease_ttl_ms)
        self._prepared_for = leaving
        logger.info(
            "beat.lease.staged",
            extra={"node": self.node, "leaving": sorted(leaving), "partitions": sorted(share)},
        )

    def announce_leaving(self) -> None:
        """SIGTERM, first step: mark this node as stopping, so that the nodes that will take
        its partitions load them while it still serves them (``_prepare_for_leavers``)."""
        self._leaving = True
        self.store.mark_leaving(self.node, self.config.lease_ttl_ms)

    def successors_ready(self) -> bool:
        """Whether every node that the hand-over would give one of our partitions has
        answered our mark (nodes marked as stopping themselves take none)."""
        live, leaving, ready = self.store.leave_view(self.node)
        staying = [n for n in live if n != self.node and n not in leaving]
        held = frozenset(self.leases)
        receivers = {
            n for n, share in assign_partitions(self.config.partitions, staying).items()
            if share & held
        }  # fmt: skip
        return receivers <= ready

    def _peer_lapse_mono(self, sent: float) -> float:
        """When the registration of the first other node to stop renewing would run out.

        A live node renews every renewal period, so its registration stays about a TTL ahead
        and this lies beyond our own next renewal. A node that died stops renewing: its
        registration runs out a TTL after its last renewal and its leases (extended right
        after it) a moment later. Looking again then, rather than at our next renewal up to a
        period later, takes its partitions within the TTL of its last renewal (a lease still
        held for that moment is asked for again after ``handover_retry_s``).
        """
        left = [s for node, s in self.store.expiries().items() if node != self.node]
        if not left:
            return float("inf")
        return sent + max(0.0, min(left)) + self.config.peer_lapse_margin_s

    def _pass_on(self, keep: frozenset[int], live: list[str]) -> None:
        """Hand on the keys that name us but that we neither hold nor will take: handed to
        us by a node that saw other live nodes than we do (two nodes joining at once), or
        not yet taken when we stop. Each goes to the node ``live`` assigns it, the key never
        absent; there is no epoch of ours to supersede (the hand-over that named us
        superseded its sender's), and the next owner takes one of its own."""
        cfg = self.config
        others = set(range(cfg.partitions)) - keep - set(self.leases)
        targets = {
            p: node
            for node, share in assign_partitions(cfg.partitions, live).items()
            if node != self.node
            for p in share
            if p in others
        }
        moved = self.store.transfer(targets, self.node, cfg.lease_ttl_ms)
        if moved:
            logger.info(
                "beat.lease.released",
                extra={
                    "node": self.node, "partitions": moved, "reason": "not_ours",
                    "handed_to": {str(p): targets[p] for p in moved},
                },
            )  # fmt: skip
            self.store.announce(self.node)

    def take_waiting(self) -> list[int]:
        """Take those of the awaited partitions their owners have released since; no heartbeat
        or renewal (a tick that just took a share and loaded it asks again before claiming)."""
        gained = self._acquire(sorted(self.waiting_for))
        if gained:
            self.waiting_for -= frozenset(gained)
            PARTITIONS_OWNED.set(len(self.leases))
            logger.info(
                "beat.lease.owned",
                extra={
                    "node": self.node,
                    "gained": gained,
                    "lost": [],
                    "owned": sorted(self.leases),
                },
            )
        return gained

    def _renew(self, sent: float) -> list[int]:
        cfg = self.config
        held = sorted(self.leases)
        extended = set(self.store.extend(held, self.node, cfg.lease_ttl_ms))
        lost = [p for p in held if p not in extended]
        count(LEASE_RENEWALS, len(held) - len(lost))
        with self._lock:
            for p in held:
                if p in extended:
                    self.leases[p] = lease_renewed(
                        self.leases[p], sent_at_mono=sent, ttl_s=cfg.lease_ttl_s,
                        renew_s=cfg.lease_renew_s,
                    )  # fmt: skip
                else:
                    del self.leases[p]
            gap = self._renewed(sent)
        if held:
            LEASE_RENEWAL_GAP.observe(gap)
        if lost:
            count(LEASES_LOST, len(lost))
            logger.warning("beat.lease.lost", extra={"node": self.node, "partitions": lost})
        return lost

    def keep_alive(self) -> None:
        """Heartbeat and extend the held leases, without rebalancing: the lease keeper's
        step (beat_engine/lease_keeper.py). A lease not extended is left to lapse locally;
        the engine's next renewal finds it lost and drops it (with its heap entries)."""
        cfg = self.config
        with self._lock:
            held = dict(self.leases)
        if not held or not self._announced:
            return
        sent = self.clock.monotonic()
        live = self.store.heartbeat(self.node, cfg.lease_ttl_ms)
        extended = set(self.store.extend(sorted(held), self.node, cfg.lease_ttl_ms))
        with self._lock:
            for p, lease in held.items():
                if p in extended and self.leases.get(p) is lease:
                    self.leases[p] = lease_renewed(
                        lease, sent_at_mono=sent, ttl_s=cfg.lease_ttl_s,
                        renew_s=cfg.lease_renew_s,
                    )  # fmt: skip
            gap = self._renewed(sent)
        LEASE_RENEWAL_GAP.observe(gap)
        count(LEASE_RENEWALS, len(extended))
        if live != self._live:
            # A node joined or left while the engine was busy: rebalance at its next tick.
            self.rebalance_soon()

    def _renewed(self, sent: float) -> float:
        """Record a renewal sent at ``sent`` (under the lock); the gap since the last one."""
        gap = max(0.0, sent - self.renewed_mono)
        self.renewed_mono = max(self.renewed_mono, sent)
        return gap

    def _prepare_join(self) -> None:
        """Before the first heartbeat: the share we will ask for, among the nodes live now."""
        live = sorted({*self.store.live_nodes(), self.node})
        self.before_join(
            assign_partitions(self.config.partitions, live).get(self.node, frozenset())
        )

    def _acquire(self, partitions: list[int]) -> list[int]:
        """Take the free leases among ``partitions`` and those handed to us, each with a new
        epoch from PostgreSQL (one round trip to each for all of them); returns those taken."""
        cfg = self.config
        sent = self.clock.monotonic()
        taken = self.store.acquire(partitions, self.node, cfg.lease_ttl_ms)
        if not taken:
            return []  # still held by their owners, which hand them over when they hear us
        epochs: dict[int, int] = {}
        try:
            # Our own epoch even for a partition handed to us: the key may be a previous
            # process's of this node id, whose epoch must not be ours (no stale fence).
            epochs = epochs_take(taken, node=self.node, now=self.clock.now())
        finally:
            if len(epochs) < len(taken):
                # Without an epoch the lease is useless; free it for a node that can use it.
                self.store.release([p for p in taken if p not in epochs], self.node)
        with self._lock:
            for partition, epoch in epochs.items():
                self.leases[partition] = lease_from_grant(
                    partition=partition, node=self.node, epoch=epoch, sent_at_mono=sent,
                    ttl_s=cfg.lease_ttl_s, renew_s=cfg.lease_renew_s,
                )  # fmt: skip
        count(LEASES_ACQUIRED, len(epochs))
        return sorted(epochs)

    def hand_over(self, partitions: Iterable[int], live: list[str], *, reason: str) -> list[int]:
        """Give ``partitions`` to the nodes ``live`` assigns them, with no instant at which
        nobody owns them: first our epochs are superseded in PostgreSQL (naming the new owner),
        so that nothing we still try under them is accepted, then each lease key is replaced by
        the new owner's in one Redis step. The new owner takes it when it hears our
        announcement, with its own epoch (docs/engine.md, "Hand-over")."""
        with self._lock:
            gone = {p: self.leases.pop(p).epoch for p in sorted(partitions) if p in self.leases}
        if not gone:
            return []
        assigned = assign_partitions(self.config.partitions, live)
        targets = {
            p: node
            for node, share in assigned.items()
            if node != self.node
            for p in share
            if p in gone
        }
        superseded: frozenset[int] = frozenset()
        try:
            superseded = epochs_hand_over(
                {p: gone[p] for p in targets}, targets, now=self.clock.now()
            )
        except DatabaseError:
            # The keys are let go instead: the new owners take them at their next tick.
            logger.warning("beat.lease.handover_failed", extra={"node": self.node}, exc_info=True)
        moved = self.store.transfer(
            {p: targets[p] for p in superseded}, self.node, self.config.lease_ttl_ms
        )
        # Already superseded (fenced out), no other node to take it, or no hand-over: let go.
        released = self.store.release([p for p in gone if p not in moved], self.node)
        logger.info(
            "beat.lease.released",
            extra={
                "node": self.node,
                "partitions": sorted(gone),
                "handed_to": {str(p): targets[p] for p in moved},
                "released": released,
                "reason": reason,
            },
        )
        return sorted(gone)

    def drop(self, partitions: Iterable[int], *, reason: str = "fenced") -> list[int]:
        with self._lock:
            gone = sorted(p for p in partitions if p in self.leases)
            for p in gone:
                del self.leases[p]
        if gone:
            self.store.release(gone, self.node)
            logger.info(
                "beat.lease.released",
                extra={"node": self.node, "partitions": gone, "reason": reason},
            )
        return gone

    def release_all(self) -> list[int]:
        """SIGTERM: give every lease back now, so others need not wait for the TTL."""
        gone = sorted(self.leases)
        try:
            # Other nodes stopping too take none: each hands its partitions to the nodes
            # that stay, not to one that would pass them on again.
            live, leaving, _ready = self.store.leave_view(self.node)
            others = [n for n in live if n != self.node and n not in leaving]
            # Out of the registry first: a survivor that hears the hand-over below and
            # still counted us live would pass the keys straight back to us (a node it
            # believes will take them), and nobody would fire those partitions until our
            # registration ran out.
            self.store.leave(self.node)
            # Handed straight to the nodes that take them once we are gone, which they do
            # when they hear the hand-over.
            self.hand_over(gone, others, reason="shutdown")
            self._pass_on(frozenset(), others)
        except redis.RedisError:
            logger.warning("beat.lease.release_failed", extra={"node": self.node}, exc_info=True)
        with self._lock:
            self.leases.clear()
        PARTITIONS_OWNED.set(0)
        return gone
