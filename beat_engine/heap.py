"""Min-heap of upcoming firings for owned partitions, with lazy invalidation."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID


@dataclass(frozen=True, order=True)
class DueEntry:
    """A job's next dispatch instant (next_fire_at plus its jitter)."""

    due_at: datetime
    job_id: UUID = field(compare=False)
    partition: int = field(compare=False)


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
