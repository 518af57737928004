"""FairDueHeap: the due heap, one heap per tenant, handed out in fair rounds (pure, no I/O).

A spike puts every firing due at one instant into the heap at once: 200,000 of one tenant's
and one of another's. In one heap ordered by instant the lone firing sits wherever the
horizon load put it among the 200,000 (ties are broken by push order), so a window of the
first due entries, however fairly ordered, finds it only after the windows before it were
claimed: seconds. Here each tenant has its own heap, and ``pop_due`` serves the tenants with
a due head in rounds: the tenant that has been served least in the current drain goes next,
and within a round the earlier instant goes first. The lone firing is therefore in the first
batch of the spike, whatever its place in the horizon.

The rounds go on across calls while a drain lasts (``turn`` counts what each tenant was
handed), and end when a call finds fewer due entries than it may take. A tenant that comes
due in the middle of a drain joins at the current round (its turn starts at the turn last
served, as a virtual clock in fair queueing), so it neither waits for the big tenant's
backlog nor, having waited for nothing, takes every turn until it has caught up.

Same interface as beat_engine.heap.DueHeap (push, discard, peek, pop_due, ...), with the
same lazy invalidation: at most one live entry per job.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from beat_engine.heap import DueEntry

# (due_at, sequence, entry): the sequence breaks ties so entries are never compared.
_Item = tuple[datetime, int, DueEntry]


class FairDueHeap:
    def __init__(self) -> None:
        self._by_tenant: dict[int, list[_Item]] = {}
        self._live: dict[UUID, DueEntry] = {}
        # (head due_at, head sequence, tenant): the earliest head (peek) and the tenants whose
        # head is due. An item counts only while ``_listed[tenant]`` is its sequence and that
        # is still the tenant's head; others are dropped or corrected when they surface.
        self._heads: list[tuple[datetime, int, int]] = []
        self._listed: dict[int, int] = {}
        self._seq = 0
        # Items in the tenants' heaps, live or not: compacted once dead ones dominate.
        self._items = 0
        # Entries handed out per tenant in the current drain, and the turn last served.
        self._turn: dict[int, int] = {}
        self._round = 0
        self._drained = False
        # The turn of each entry handed out in the current drain and not yet claimed, and the
        # highest turn of those the engine has put in a claim batch (``claiming``): how far
        # the claims, not the pops, have gone through the rounds. A window of 20,000 entries
        # is popped at once, so the round popped is its end; a newcomer measured against it
        # would wait for the whole window (beat_engine/engine.py, _next_batch).
        self._turn_of: dict[UUID, int] = {}
        self._claimed = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._live

    def push(self, entry: DueEntry) -> None:
        """Add or replace the entry of ``entry.job_id``."""
        self._live[entry.job_id] = entry
        self._seq += 1
        heap = self._by_tenant.setdefault(entry.tenant, [])
        item = (entry.due_at, self._seq, entry)
        heapq.heappush(heap, item)
        self._items += 1
        if heap[0] is item:
            self._list(entry.tenant, item)
        if self._items > 2 * len(self._live) + 1024:
            self._compact()

    def push_many(self, entries: Iterable[DueEntry]) -> None:
        for entry in entries:
            self.push(entry)

    def discard(self, job_id: UUID) -> None:
        self._live.pop(job_id, None)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = frozenset(partitions)
        if not gone:
            return
        self._live = {job: e for job, e in self._live.items() if e.partition not in gone}
        self._compact()

    def peek(self) -> DueEntry | None:
        while self._heads:
            _due, seq, tenant = self._heads[0]
            if self._valid(seq, tenant):
                return self._by_tenant[tenant][0][2]
            self._relist(heapq.heappop(self._heads))
        return None

    def pop_due(self, now: datetime, limit: int) -> list[DueEntry]:
        """Up to ``limit`` entries due at or before ``now``, in fair rounds across tenants."""
        if self._drained:
            self._turn.clear()
            self._round = 0
            self._drained = False
            self._turn_of.clear()
            self._claimed = 0
        # (turn, head due_at, head sequence, tenant) of every tenant whose head is due.
        ready: list[tuple[int, datetime, int, int]] = []
        while self._heads and self._heads[0][0] <= now:
            due, seq, tenant = heapq.heappop(self._heads)
            if not self._valid(seq, tenant):
                self._relist((due, seq, tenant))
                continue
            del self._listed[tenant]
            turn = max(self._turn.get(tenant, 0), self._round)
            heapq.heappush(ready, (turn, due, seq, tenant))
        taken: list[DueEntry] = []
        while ready and len(taken) < limit:
            turn, _due, _seq, tenant = heapq.heappop(ready)
            # The only tenant due (the usual spike, or one tenant's tail): its entries in a
            # run, without a round-trip through ``ready`` per entry.
            run = limit - len(taken) if not ready else 1
            heap = self._by_tenant[tenant]
            head: _Item | None = heap[0]
            while head is not None and run > 0 and head[0] <= now:
                heapq.heappop(heap)
                self._items -= 1
                entry = head[2]
                del self._live[entry.job_id]
                taken.append(entry)
                self._turn_of[entry.job_id] = turn
                self._round = turn
                turn += 1
                run -= 1
                head = self._head(tenant)
            self._turn[tenant] = turn
            if head is None:
                continue
            if head[0] <= now:
                heapq.heappush(ready, (turn, head[0], head[1], tenant))
            else:
                self._list(tenant, head)
        for _turn, due, seq, tenant in ready:
            self._list(tenant, (due, seq, self._by_tenant[tenant][0][2]))
        # Nothing more due: the drain is over once what was taken is claimed; the next call
        # starts its rounds afresh (pop_behind still needs them meanwhile).
        self._drained = len(taken) < limit
        return taken

    def claiming(self, entries: Iterable[DueEntry]) -> None:
        """``entries`` (handed out by pop_due or pop_behind) go into a claim batch now: the
        rounds claimed have reached their turns."""
        turn_of = self._turn_of
        for entry in entries:
            turn = turn_of.pop(entry.job_id, None)
            if turn is not None and turn > self._claimed:
                self._claimed = turn

    def pop_behind(self, now: datetime, limit: int) -> list[DueEntry]:
        """While a drain is on: one due entry of each tenant served less than the round being
        claimed (``claiming``: one that fell due after the window being claimed was taken),
        at most ``limit``, earliest first. The engine claims them in a batch of their own
        before the window's next batch, so such a firing waits for the claim in hand only, not
        for the rest of the window; each counts as the tenant's turn in the round being
        claimed, so the tenant's next firing comes out ahead again once the claims have passed
        that round (one batch of a lone big tenant), not only in the next window."""
        if not self._turn:
            return []
        behind: list[tuple[datetime, int, int]] = []
        skipped: list[tuple[datetime, int, int]] = []
        while self._heads and self._heads[0][0] <= now:
            due, seq, tenant = heapq.heappop(self._heads)
            if not self._valid(seq, tenant):
                self._relist((due, seq, tenant))
                continue
            (behind if self._turn.get(tenant, 0) <= self._claimed else skipped).append(
                (due, seq, tenant)
            )
        for item in skipped:
            heapq.heappush(self._heads, item)
        taken: list[DueEntry] = []
        for due, seq, tenant in behind:
            if not self._valid(seq, tenant):
                # A second copy of a listing already taken above: a tenant's head is listed
                # anew when an entry pushed ahead of it is handed out, its first listing still
                # in the heads. The tenant's current head is listed already.
                continue
            if len(taken) >= limit:
                heapq.heappush(self._heads, (due, seq, tenant))
                continue
            del self._listed[tenant]
            entry = heapq.heappop(self._by_tenant[tenant])[2]
            self._items -= 1
            del self._live[entry.job_id]
            taken.append(entry)
            turn = max(self._turn.get(tenant, 0), self._claimed)
            self._turn_of[entry.job_id] = turn
            self._turn[tenant] = turn + 1
            head = self._head(tenant)
            if head is not None:
                self._list(tenant, head)
        return taken

    def _list(self, tenant: int, item: _Item) -> None:
        self._listed[tenant] = item[1]
        heapq.heappush(self._heads, (item[0], item[1], tenant))

    def _valid(self, seq: int, tenant: int) -> bool:
        if self._listed.get(tenant) != seq:
            return False
        head = self._by_tenant[tenant][0]
        return head[1] == seq and self._live.get(head[2].job_id) is head[2]

    def _relist(self, stale: tuple[datetime, int, int]) -> None:
        """A heads item that no longer counts: a copy superseded by a later listing is
        dropped; the tenant's own listing, whose entry was discarded or replaced, is replaced
        by the tenant's live head (if it has one)."""
        _due, seq, tenant = stale
        if self._listed.get(tenant) != seq:
            return
        del self._listed[tenant]
        head = self._head(tenant)
        if head is not None:
            self._list(tenant, head)

    def _head(self, tenant: int) -> _Item | None:
        """The tenant's earliest live item, dropping dead ones; None (and the tenant's heap
        removed) when it has none."""
        heap = self._by_tenant[tenant]
        live = self._live
        while heap and live.get(heap[0][2].job_id) is not heap[0][2]:
            heapq.heappop(heap)
            self._items -= 1
        if not heap:
            del self._by_tenant[tenant]
            return None
        return heap[0]

    def _compact(self) -> None:
        live = self._live
        tenants: dict[int, list[_Item]] = {}
        for tenant, heap in self._by_tenant.items():
            kept = [item for item in heap if live.get(item[2].job_id) is item[2]]
            if kept:
                heapq.heapify(kept)
                tenants[tenant] = kept
        self._by_tenant = tenants
        self._items = sum(len(heap) for heap in tenants.values())
        self._listed = {t: heap[0][1] for t, heap in tenants.items()}
        self._heads = [(heap[0][0], heap[0][1], t) for t, heap in tenants.items()]
        heapq.heapify(self._heads)
