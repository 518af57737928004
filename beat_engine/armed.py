"""ArmedRuns: runs claimed ahead of their instant, held in memory to be pushed at it.

A claim ahead (docs/engine.md, "Claim ahead") writes the run and advances its job seconds
before the instant, so that at the instant only the push is left. The run waits here with its
rendered message; its job's next firing waits with it and enters the heap once the run is
pushed, so a job has one firing claimed ahead at a time on this node, however short its
interval. Nothing here is the record: the runs are queued in PostgreSQL from their instant on,
and a node that loses a partition (or dies) leaves them to the new owner, which arms them again
when it takes the partition over or, failing that, its sweep sends them.

The runs are kept in one bucket per instant, the instants in a heap: a spike's 50,000 runs
share one instant, and handing them out is taking one bucket, not 50,000 heap pops (which
took 0.3 s of the instant on the 2-core reference machine, docs/engine.md, "Claim ahead").
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from beat_engine.broker_staging import StagedGroup
from beat_engine.heap import DueEntry
from beat_engine.publisher import QueuedRun, Rendered


@dataclass(frozen=True)
class Armed:
    run: QueuedRun
    job_id: uuid.UUID
    # The run's message rendered at the claim (broker list, message, epoch), if any.
    rendered: tuple[str, str, int] | None
    # The staging list its message waits in, if staged (beat_engine/broker_staging.py).
    staged: StagedGroup | None = None


@dataclass
class DueRuns:
    """Armed runs handed out at their instant, for the push."""

    runs: list[QueuedRun]
    rendered: Rendered
    staged: list[StagedGroup]
    taken: list[Armed]


class ArmedRuns:
    def __init__(self) -> None:
        # Every bucket holds only runs still armed, in the order they were armed, and every
        # instant in the heap has a bucket: arm and drop_partitions keep both true.
        self._instants: list[datetime] = []
        self._buckets: dict[datetime, list[Armed]] = {}
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
        staged: StagedGroup | None = None,
    ) -> None:
        assert run.due_at is not None, "an armed run is pushed at its due instant"
        armed = Armed(run, job_id, rendered, staged)
        earlier = self._runs.get(run.run_id)
        if earlier is not None:
            # Armed again (rare: read back at a takeover): the later arming replaces it.
            self._unbucket(earlier)
        self._runs[run.run_id] = armed
        bucket = self._buckets.get(run.due_at)
        if bucket is None:
            bucket = self._buckets[run.due_at] = []
            heapq.heappush(self._instants, run.due_at)
        bucket.append(armed)
        if following is not None:
            self._following[job_id] = following

    def holds_job(self, job_id: uuid.UUID) -> bool:
        return job_id in self._following

    def next_due(self) -> datetime | None:
        return self._instants[0] if self._instants else None

    def pop_due(self, now: datetime) -> DueRuns:
        """The runs due by ``now`` (earliest first), their rendered messages and the staging
        lists their messages wait in: only what the push needs, gathered without a hash of
        any run's id. The caller hands them to ``release`` once pushed (whatever the push's
        outcome), for their jobs' next firings."""
        taken: list[Armed] = []
        while self._instants and self._instants[0] <= now:
            taken.extend(self._buckets.pop(heapq.heappop(self._instants)))
        rendered: Rendered = {a.run.run_id: a.rendered for a in taken if a.rendered is not None}
        staged = {a.staged: None for a in taken if a.staged is not None}
        return DueRuns([a.run for a in taken], rendered, list(staged), taken)

    def release(self, due: DueRuns) -> list[DueEntry]:
        """Forget runs handed out by pop_due; returns their jobs' next firings for the heap
        (a job whose partition was dropped meanwhile has none: it is not ours)."""
        held, jobs = self._runs, self._following
        following: list[DueEntry] = []
        for armed in due.taken:
            if held.get(armed.run.run_id) is armed:
                del held[armed.run.run_id]
            entry = jobs.pop(armed.job_id, None)
            if entry is not None:
                following.append(entry)
        return following

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
        for instant, bucket in list(self._buckets.items()):
            kept = [armed for armed in bucket if armed.run.partition not in gone]
            if kept:
                self._buckets[instant] = kept
            else:
                del self._buckets[instant]
        self._instants = list(self._buckets)
        heapq.heapify(self._instants)
        for job, entry in list(self._following.items()):
            if entry.partition in gone:
                del self._following[job]

    def _unbucket(self, armed: Armed) -> None:
        instant = armed.run.due_at
        assert instant is not None
        bucket = self._buckets[instant]
        del bucket[next(i for i, held in enumerate(bucket) if held is armed)]
        if not bucket:
            del self._buckets[instant]
            self._instants.remove(instant)
            heapq.heapify(self._instants)
