"""LeaseKeeper: renews the node's leases on a thread of its own, so claim work never starves them.

The engine's tick renews and rebalances when a renewal is due, but a tick can be busy for
seconds in one step (a claim statement, the marks of a spike, a takeover sweep): with a 3 s
TTL a 50,000-firing spike lost 104 leases to lapses, each re-taken with a new epoch
(bench/bench_failover.py, before this thread). The keeper wakes on the monotonic clock when
a renewal is due and nobody renewed: it heartbeats the node and extends its held leases
through the lease store (redis-py's pool gives this thread its own connection, so it never
waits behind the engine's calls; the engine's claims and pushes use PostgreSQL and the broker
client, not this one). It only keeps leases alive: taking, releasing and rebalancing stay on
the engine's thread (beat_engine/ownership.py).

Safety does not depend on it: a claim still passes the PostgreSQL fence (no stale fence,
docs/architecture.md, Invariants). Liveness does: a keeper renewing for a hung engine would
hold partitions nobody serves, so it renews only while the engine's loop came round within
``stall_s``; past that the leases lapse and the other nodes take them over.
"""

from __future__ import annotations

import logging
import threading

import redis

from beat_engine.clock import Clock
from beat_engine.ownership import Ownership

logger = logging.getLogger("beat_engine")


class LeaseKeeper:
    def __init__(self, ownership: Ownership, clock: Clock, *, stall_s: float) -> None:
        self._ownership = ownership
        self._clock = clock
        self._stall_s = stall_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="beat-leases", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                wait = self.step()
                failures = 0
            except redis.RedisError:
                # Redis unreachable: retry soon; the leases lapse if it stays away, as they
                # would without this thread, and the engine's own renewal logs the loss.
                failures += 1
                if failures == 1:
                    logger.warning(
                        "beat.lease.keeper_failed",
                        extra={"node": self._ownership.node},
                        exc_info=True,
                    )
                wait = min(0.5, self._ownership.config.lease_renew_s / 2)
            self._stop.wait(max(0.01, wait))

    def step(self) -> float:
        """Renew if a renewal is due and the engine is alive; returns seconds to the next."""
        own = self._ownership
        mono = self._clock.monotonic()
        due = own.renewed_mono + own.config.lease_renew_s
        if mono < due:
            return due - mono
        if mono - own.alive_mono > self._stall_s:
            # The engine's loop is stuck: let the leases lapse so others serve the partitions.
            return own.config.lease_renew_s
        own.keep_alive()
        return own.config.lease_renew_s
