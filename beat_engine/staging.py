"""StagedHorizon: partitions a node is about to take, loaded before it takes them.

A node that takes a share of the partitions loads their horizon (a third of every job when
it joins two others) before it can claim any of their firings: on this 2-core machine, under
load, that took long enough for the firings due meanwhile to be published seconds late
(bench/bench_rolling.py). A joining node therefore loads its share's horizon before it
registers, while the current owners still serve it; when a partition is handed over, the
engine seeds the heap from here and reads only the difference (the horizon's advance since,
and the jobs the change feed named meanwhile). Entries the old owner claimed meanwhile are
stale: the claim reads each job's row and puts it where it belongs (beat_engine/claims.py).
Notifications lost meanwhile are covered as for any owner, by the periodic full reload.

The same holds for the nodes that stay when one stops: the stopping node marks itself as
leaving and keeps serving its partitions while each of them loads here the partitions it will
take, and it hands them over once they have answered (docs/engine.md, "Hand-over").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from beat_engine.clock import Clock
from beat_engine.heap import DueEntry
from beat_engine.horizon import load_horizon


@dataclass
class StagedShare:
    entries: list[DueEntry] = field(default_factory=list)
    loaded_until: dict[int, datetime] = field(default_factory=dict)
    # Jobs of these partitions the change feed named after they were loaded: reload them.
    changed: dict[uuid.UUID, int] = field(default_factory=dict)


class StagedHorizon:
    def __init__(self, clock: Clock, *, max_age_s: float) -> None:
        self._clock = clock
        # Older than this, a staged share is dropped and loaded afresh when taken: the more
        # time passed, the more of its entries the previous owner made stale.
        self._max_age_s = max_age_s
        self._entries: dict[int, list[DueEntry]] = {}
        self._loaded_until: dict[int, datetime] = {}
        self._changed: dict[uuid.UUID, int] = {}
        self._at_mono = clock.monotonic()

    def stage(self, partitions: Iterable[int], *, until: datetime, page: int) -> None:
        parts = sorted(partitions)
        loaded = load_horizon(parts, until=until, page=page)
        self._entries = {p: [] for p in parts}
        for entry in loaded.entries:
            self._entries[entry.partition].append(entry)
        self._loaded_until = dict(loaded.loaded_until)
        self._changed = {}
        self._at_mono = self._clock.monotonic()

    def note(self, jobs: Mapping[uuid.UUID, int]) -> None:
        """Record the changed jobs of staged partitions (those of held ones are reloaded)."""
        for job, partition in jobs.items():
            if partition in self._loaded_until:
                self._changed[job] = partition

    def take(self, partitions: Iterable[int]) -> StagedShare:
        """The staged part of ``partitions``, removed from here; empty once too old."""
        if self._clock.monotonic() - self._at_mono > self._max_age_s:
            self._entries, self._loaded_until, self._changed = {}, {}, {}
        share = StagedShare()
        for p in partitions:
            if p in self._loaded_until:
                share.entries.extend(self._entries.pop(p, []))
                share.loaded_until[p] = self._loaded_until.pop(p)
        share.changed = {j: p for j, p in self._changed.items() if p in share.loaded_until}
        for job in share.changed:
            del self._changed[job]
        return share

    def job_ids(self) -> frozenset[uuid.UUID]:
        """The jobs with a staged due entry."""
        return frozenset(e.job_id for entries in self._entries.values() for e in entries)

    def __len__(self) -> int:
        return len(self._loaded_until)
