"""ArmedRuns: runs claimed ahead of their instant, held in memory to be pushed at it.

A claim ahead (docs/engine.md, "Claim ahead") writes the run and advances its job seconds
before the instant, so that at the instant only the push is left. The run waits here with its
rendered message; its job's next firing waits with it and enters the heap once the run is
pushed, so a job has one firing claimed ahead at a time on this node, however short its
interval. Nothing here is the record: the runs are queued in PostgreSQL from their instant on,
and a node that loses a partition (or dies) leaves them to the new owner, which arms them again
when it takes the partition over or, failing that, its sweep sends them.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from beat_engine.heap import DueEntry
from beat_engine.publisher import QueuedRun, Rendered


@dataclass(frozen=True)
class Armed:
    run: QueuedRun
    job_id: uuid.UUID
    # The run's message rendered at the claim (broker list, message, epoch), if any.
    rendered: tuple[str, str, int] | None


class ArmedRuns:
    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, Armed]] = []
        self._seq = itertools.count()
        self._runs: dict[uuid.UUID, Armed] = {}
        # Each armed job's next firing, for the heap once its armed run is pushed.
        self._following: dict[uuid.UUID, DueEntry] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def arm(
        self,
        run: QueuedRun,
        job_id: uuid.UUID,
        rendered: tuple[str, str, int] | None = None,
        following: DueEntry | None = None,
    ) -> None:
        assert run.due_at is not None, "an armed run is pushed at its due instant"
        armed = Armed(run, job_id, rendered)
        self._runs[run.run_id] = armed
        heapq.heappush(self._heap, (run.due_at, next(self._seq), armed))
        if following is not None:
            self._following[job_id] = following

    def holds_job(self, job_id: uuid.UUID) -> bool:
        return job_id in self._following

    def next_due(self) -> datetime | None:
        self._skip_dropped()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime) -> tuple[list[QueuedRun], Rendered, list[DueEntry]]:
        """The runs due by ``now`` (earliest first), their rendered messages, and their jobs'
        next firings for the heap."""
        runs: list[QueuedRun] = []
        rendered: Rendered = {}
        following: list[DueEntry] = []
        while self._heap:
            due, _seq, armed = self._heap[0]
            if self._runs.get(armed.run.run_id) is not armed:
                heapq.heappop(self._heap)
                continue
            if due > now:
                break
            heapq.heappop(self._heap)
            del self._runs[armed.run.run_id]
            runs.append(armed.run)
            if armed.rendered is not None:
                rendered[armed.run.run_id] = armed.rendered
            entry = self._following.pop(armed.job_id, None)
            if entry is not None:
                following.append(entry)
        return runs, rendered, following

    def forget_following(self, jobs: Iterable[uuid.UUID]) -> None:
        """Jobs reloaded from their rows (changed): the row says where each belongs now."""
        for job in jobs:
            self._following.pop(job, None)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Partitions no longer ours: their runs are the new owner's to push."""
        gone = frozenset(partitions)
        if not gone:
            return
        for run_id, armed in list(self._runs.items()):
            if armed.run.partition in gone:
                del self._runs[run_id]
        for job, entry in list(self._following.items()):
            if entry.partition in gone:
                del self._following[job]

    def _skip_dropped(self) -> None:
        while self._heap and self._runs.get(self._heap[0][2].run.run_id) is not self._heap[0][2]:
            heapq.heappop(self._heap)
