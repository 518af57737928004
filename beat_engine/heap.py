"""Min-heap of upcoming firings for owned partitions, with lazy invalidation."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from beat_engine.priority_order import DEFAULT as DEFAULT_PRIORITY


@dataclass(frozen=True, order=True)
class DueEntry:
    """A job's next dispatch instant (next_fire_at plus its jitter)."""

    due_at: datetime
    job_id: UUID = field(compare=False)
    partition: int = field(compare=False)
    # For fair ordering across tenants when more than one claim batch is due at once.
    tenant: int = field(default=0, compare=False)
    # The job's next_fire_at, when it differs from due_at (jitter, a deferred retry): the
    # horizon is paged by next_fire_at, so whether an entry lies in the loaded horizon is
    # judged on it, never on the jittered instant.
    fire_at: datetime | None = field(default=None, compare=False)
    # The job's priority, 0 (highest) to 9: the claim order of a backlog (priority_order.py).
    priority: int = field(default=DEFAULT_PRIORITY, compare=False)

    @property
    def horizon_key(self) -> datetime:
        """Where the entry sits in the horizon's (partition, next_fire_at) order."""
        return self.due_at if self.fire_at is None else self.fire_at


def interleave_by_tenant(entries: Sequence[DueEntry]) -> list[DueEntry]:
    """Round-robin over tenants: the first entry of each tenant, then the second of each, ...

    ``entries`` come earliest first; each tenant keeps its own order, and within a round the
    earlier entry goes first. So one tenant's 40,000 due firings cannot push
    another tenant's single one out of the first claim batch (docs/engine.md "Fairness and
    tenant limits").
    """
    rank: dict[int, int] = {}
    keyed: list[tuple[int, int]] = []
    for index, entry in enumerate(entries):
        turn = rank.get(entry.tenant, 0)
        rank[entry.tenant] = turn + 1
        keyed.append((turn, index))
    keyed.sort()
    return [entries[index] for _turn, index in keyed]


class DueHeap:
    """At most one live entry per job; replaced or discarded entries stay in the list until
    they surface, as in heapq's documented "mark removed" recipe, so updates are O(log n)."""

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, DueEntry]] = []
        self._live: dict[UUID, DueEntry] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._live

    def push(self, entry: DueEntry) -> None:
        """Add or replace the entry of ``entry.job_id``."""
        self._live[entry.job_id] = entry
        self._seq += 1
        # The sequence number breaks ties so entries themselves are never compared by id.
        heapq.heappush(self._heap, (entry.due_at, self._seq, entry))

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
        self._skip_stale()
        return self._heap[0][2] if self._heap else None

    def pop_due(self, now: datetime, limit: int) -> list[DueEntry]:
        """Remove and return up to ``limit`` entries due at or before ``now``, earliest first."""
        due: list[DueEntry] = []
        while len(due) < limit:
            self._skip_stale()
            if not self._heap or self._heap[0][0] > now:
                break
            entry = heapq.heappop(self._heap)[2]
            del self._live[entry.job_id]
            due.append(entry)
        return due

    def _skip_stale(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0][2].job_id) is not heap[0][2]:
            heapq.heappop(heap)
        # Many replacements leave many dead tuples behind; rebuild once they dominate.
        if len(heap) > 2 * len(self._live) + 1024:
            self._compact()

    def _compact(self) -> None:
        self._heap = [item for item in self._heap if self._live.get(item[2].job_id) is item[2]]
        heapq.heapify(self._heap)
