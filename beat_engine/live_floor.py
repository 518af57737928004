"""How far back the engine loop's periodic statements look for live runs (docs/engine.md,
"The live floor").

The timer pass, the lease reaper and the sweep look for runs in a live state (pending,
retry_wait, running, queued) by engine partition. Unbounded in time, PostgreSQL plans each of
them over every day partition of the history and its indexes: with a month of history (35
partitions) planning alone took 6-15 ms a statement, several times a second, on the claim
loop's thread. Bounded below by an instant and the run ids from it, each plans only the days
from there on (and the default partition, which no bound excludes).

The floor is the oldest firing of a live run in the node's partitions when it was last read
(one unbounded statement), and never later than ``RECENT`` before then. A run live then is at or
after the floor, so every bounded pass sees it. A run that turns live later at a firing older
than the floor (a backfill or replay reaching further back than ``RECENT``) is live when the
floor is read again, at most ``READ_EVERY_S`` later, and seen from then on: late by that much
at worst, never lost. Until the floor is read for a set of partitions (start, take-over) or
when it is overdue (the read failed), the passes are unbounded. Pure logic: the instants and the
monotonic clock are given; the statements' bound is beat_engine/timers.py's ``bound_sql``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

# How often the floor is read again.
READ_EVERY_S = 30.0
# The floor is never later than this before its reading: a backfill or replay of the last two
# days' firings is seen by the next bounded pass.
RECENT = timedelta(days=2)


class LiveFloor:
    def __init__(self, *, read_every_s: float = READ_EVERY_S, recent: timedelta = RECENT) -> None:
        self._read_every_s = read_every_s
        self._recent = recent
        self._since: datetime | None = None
        self._partitions: frozenset[int] = frozenset()
        # When the floor is to be read again; until then it holds. Past it, the passes are
        # unbounded: a floor that could not be read again is never trusted longer.
        self._read_by = float("-inf")

    def since(self, partitions: Iterable[int], mono: float) -> datetime | None:
        """The bound for a pass over ``partitions`` now; None: unbounded, because the floor is
        overdue or was read without some of these partitions (whose live runs it never saw)."""
        if (
            mono >= self._read_by + self._read_every_s
            or not frozenset(partitions) <= self._partitions
        ):
            return None
        return self._since

    def due(self, mono: float) -> bool:
        """Whether the floor is to be read again now."""
        return mono >= self._read_by

    def read(
        self, partitions: Iterable[int], oldest_live: datetime | None, *, now: datetime, mono: float
    ) -> None:
        """Record the floor read at ``now``: ``oldest_live`` is the oldest firing of a live run
        in ``partitions`` (None: there is none)."""
        floor = now - self._recent
        if oldest_live is not None:
            floor = min(floor, oldest_live)
        self._since = floor
        self._partitions = frozenset(partitions)
        self._read_by = mono + self._read_every_s

    def expire(self) -> None:
        """Read the floor again at the next pass (partitions were taken over)."""
        self._read_by = float("-inf")
