"""Backpressure to the broker: a bound on each queue's depth, and the runs held back (pure).

When a queue's depth in the broker reaches ``bound`` messages, the engine stops pushing to it:
the runs it claims for that queue stay ``queued`` and unpublished in PostgreSQL (claimed, their
lateness not yet written) and wait here, in memory, until the workers have taken messages
away. Nothing is dropped: the database is the queue of record, and what this node holds is
found there again by the next owner's takeover sweep if the node dies (Redis is a hint,
docs/architecture.md, Invariants). The run's lateness is written when it is really pushed.

The held runs go out in fair rounds across tenants, as the claims do (beat_engine/fair_order.py):
the tenant served least in the current hold goes next, a tenant's own runs highest priority
first (0 highest), then oldest first, except on the reserved turns (SCHEDULER_LOW_PRIORITY_SHARE
of each tenant's releases), which take its lowest priority held (beat_engine/priority_order.py:
a steady stream of a tenant's urgent runs does not keep its low-priority ones in the hold).
So one tenant's 200,000 held runs do not stand in front of another tenant's run claimed
after them; and since the broker holds at most ``bound`` of them, that run starts after at
most ``bound`` messages, not after the whole backlog.

QueueRoom decides how many messages a queue may still take. It reads the depth from the broker
only when its estimate says the queue might be full: between reads, what this node pushed is
added to the last depth read, an upper bound since workers only take messages away. A spike
below the bound therefore costs no read at all.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from fractions import Fraction
from typing import Generic, Protocol, TypeVar
from uuid import UUID

from beat_engine.priority_order import DEFAULT_SHARE, ReservedShare, pick


class Holdable(Protocol):
    @property
    def run_id(self) -> UUID: ...
    @property
    def partition(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def tenant(self) -> int: ...


R = TypeVar("R", bound=Holdable)


class QueueRoom:
    """Room left in each queue below its bound (``bound`` 0: no bound), from depths the caller
    reads; ``bound_of``, when given, says each queue's bound now (at most ``bound``: the
    adaptive bound, beat_engine/drain_bound.py)."""

    def __init__(self, bound: int, bound_of: Callable[[str], int] | None = None) -> None:
        self.bound = bound
        self._bound_of = bound_of
        # The last depth read plus what was pushed since: never below the real depth.
        self._estimate: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.bound > 0

    def bound_for(self, queue: str) -> int:
        if self._bound_of is None:
            return self.bound
        return min(self.bound, self._bound_of(queue))

    def must_read(self, queue: str, wanted: int) -> bool:
        """Whether pushing ``wanted`` more might pass the bound by the estimate (or there is
        no estimate yet): then the caller reads the depth and calls ``observed``."""
        estimate = self._estimate.get(queue)
        return self.enabled and (estimate is None or estimate + wanted > self.bound_for(queue))

    def observed(self, queue: str, depth: int) -> None:
        self._estimate[queue] = depth

    def room(self, queue: str) -> int:
        if not self.enabled:
            return 1 << 62
        bound = self.bound_for(queue)
        return max(0, bound - self._estimate.get(queue, bound))

    def pushed(self, queue: str, count: int) -> None:
        if queue in self._estimate:
            self._estimate[queue] += count


class HeldRuns(Generic[R]):
    """Runs waiting for room in their queue, per queue, handed out in fair rounds by tenant."""

    def __init__(self, low_priority_share: float | Fraction = DEFAULT_SHARE) -> None:
        # queue -> tenant -> priority -> (sequence, run), oldest first
        self._queues: dict[str, dict[int, dict[int, deque[tuple[int, R]]]]] = {}
        # Each held tenant's reserved turns for its lowest priority, per queue.
        self._share = low_priority_share
        self._reserved: dict[tuple[str, int], ReservedShare] = {}
        self._ids: set[UUID] = set()
        self._seq = 0
        # Runs handed out per (queue, tenant) in the current hold, and the turn last served.
        self._turn: dict[str, dict[int, int]] = {}
        self._round: dict[str, int] = {}
        # For each run's batch, an instant at or before its queued_at, and how many of the
        # batch are held: the sweep never looks for unpublished runs from that instant on.
        self._since: dict[UUID, datetime] = {}
        self._since_count: dict[datetime, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._ids

    def queues(self) -> list[str]:
        return sorted(self._queues)

    def count(self, queue: str) -> int:
        return sum(
            len(fifo) for lists in self._queues.get(queue, {}).values() for fifo in lists.values()
        )

    def waiting(self, queue: str) -> bool:
        return queue in self._queues

    def oldest_since(self) -> datetime | None:
        """The earliest queued_at bound of the held runs claimed or fired here: unpublished
        runs queued before it are not among them."""
        return min(self._since_count, default=None)

    def hold(self, runs: Iterable[R], *, since: datetime | None) -> int:
        """Hold ``runs`` (those not held already); ``since``: an instant at or before their
        queued_at, None when unknown (runs the sweep found, which it skips while held)."""
        held = 0
        for run in runs:
            if run.run_id in self._ids:
                continue
            self._ids.add(run.run_id)
            if since is not None:
                self._since[run.run_id] = since
                self._since_count[since] = self._since_count.get(since, 0) + 1
            self._seq += 1
            lists = self._queues.setdefault(run.queue, {}).setdefault(run.tenant, {})
            lists.setdefault(run.priority, deque()).append((self._seq, run))
            held += 1
        return held

    def release(self, queue: str, room: int) -> list[R]:
        """Up to ``room`` held runs of ``queue``, in fair rounds across its tenants."""
        tenants = self._queues.get(queue)
        if not tenants or room <= 0:
            return []
        turns = self._turn.setdefault(queue, {})
        last = self._round.get(queue, 0)
        ready = [(max(turns.get(t, 0), last), *_head(lists), t) for t, lists in tenants.items()]
        heapq.heapify(ready)
        out: list[R] = []
        while ready and len(out) < room:
            turn, _prio, _seq, tenant = heapq.heappop(ready)
            lists = tenants[tenant]
            out.append(self._take(queue, tenant, lists))
            last = turn
            turns[tenant] = turn + 1
            if lists:
                heapq.heappush(ready, (turn + 1, *_head(lists), tenant))
            else:
                del tenants[tenant]
                self._reserved.pop((queue, tenant), None)
        self._round[queue] = last
        if not tenants:
            # The hold is over for this queue: the next starts its rounds afresh.
            del self._queues[queue]
            self._turn.pop(queue, None)
            self._round.pop(queue, None)
        self._forget(out)
        return out

    def drop_partitions(self, partitions: Iterable[int]) -> list[R]:
        """Forget the runs of partitions no longer ours: their next owner's sweep sends them."""
        gone = frozenset(partitions)
        dropped: list[R] = []
        if not gone or not self._ids:
            return dropped
        for queue in list(self._queues):
            tenants = self._queues[queue]
            for tenant in list(tenants):
                lists = tenants[tenant]
                for level in list(lists):
                    kept = deque(item for item in lists[level] if item[1].partition not in gone)
                    dropped.extend(item[1] for item in lists[level] if item[1].partition in gone)
                    if kept:
                        lists[level] = kept
                    else:
                        del lists[level]
                if not lists:
                    del tenants[tenant]
                    self._reserved.pop((queue, tenant), None)
            if not tenants:
                del self._queues[queue]
                self._turn.pop(queue, None)
                self._round.pop(queue, None)
        self._forget(dropped)
        return dropped

    def _take(self, queue: str, tenant: int, lists: dict[int, deque[tuple[int, R]]]) -> R:
        """The tenant's next run: its highest priority held, or its lowest on a reserved turn."""
        share = self._reserved.get((queue, tenant))
        if share is None:
            share = self._reserved[queue, tenant] = ReservedShare(self._share)
        level = pick(lists, lowest_first=share.lowest_first())
        share.taken()
        fifo = lists[level]
        run = fifo.popleft()[1]
        if not fifo:
            del lists[level]
        return run

    def _forget(self, runs: Sequence[R]) -> None:
        for run in runs:
            self._ids.discard(run.run_id)
            since = self._since.pop(run.run_id, None)
            if since is None:
                continue
            left = self._since_count[since] - 1
            if left:
                self._since_count[since] = left
            else:
                del self._since_count[since]


def _head(lists: dict[int, deque[tuple[int, R]]]) -> tuple[int, int]:
    """(priority, sequence) of a tenant's next run on an ordinary turn: its place in a round."""
    level = min(lists)
    return level, lists[level][0][0]
