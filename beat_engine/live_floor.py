"""How far back the engine loop's periodic statements look for live runs (docs/engine.md,
"The live floor").

The timer pass, the lease reaper and the sweep look for runs in a live state (pending,
retry_wait, running, queued) by engine partition. Unbounded in time, PostgreSQL plans each of
them over every day partition of the history and its indexes: with a month of history (35
partitions) planning alone took 6-15 ms a statement, several times a second, on the claim
loop's thread. Bounded below by an instant and the run ids from it, each plans only the days
from there on (and the default partition, which no bound excludes).

The floor is the oldest firing of a live run in the whole history when it was last read (one
unbounded statement, on a thread of its own: beat_engine/live_floor_reader.py), and never later
than ``RECENT`` before then. A run live then is at or after the floor, so every bounded pass
sees it, whichever node owns its partition now or later. A run that turns live after the read
at a firing older than the floor (a backfill or replay reaching further back than ``RECENT``)
is live when the floor is read again, about ``READ_EVERY_S`` later, and seen from then on: late
by that much at worst, never lost. Until the floor is first read, and once a read is a whole
interval overdue (it failed or hangs), the passes are unbounded.

Pure logic: the instants and the monotonic clock are given. The reading thread sets the floor
and the tick's thread reads it, so the two values change together under a lock.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

# How often the floor is read again.
READ_EVERY_S = 30.0
# The floor is never later than this before its reading: a backfill or replay of the last two
# days' firings is seen by the next bounded pass.
RECENT = timedelta(days=2)
# A read asked for and not yet recorded (running, or failed) is asked for again after this.
ASK_AGAIN_S = 5.0


class LiveFloor:
    def __init__(self, *, read_every_s: float = READ_EVERY_S, recent: timedelta = RECENT) -> None:
        self._read_every_s = read_every_s
        self._recent = recent
        self._lock = threading.Lock()
        self._since: datetime | None = None
        # When the floor is to be read again; until then it holds. Past it, the passes are
        # unbounded: a floor that could not be read again is never trusted longer.
        self._read_by = float("-inf")
        self._ask_by = float("-inf")

    def since(self, mono: float) -> datetime | None:
        """The bound for a pass now; None: unbounded, because the floor was never read or is a
        whole interval overdue."""
        with self._lock:
            if mono >= self._read_by + self._read_every_s:
                return None
            return self._since

    def due(self, mono: float) -> bool:
        """Whether to ask for a read now: the floor is due and no read was asked for in the last
        ``ASK_AGAIN_S`` (one read at a time, and a failed one tried again soon)."""
        with self._lock:
            if mono < self._read_by or mono < self._ask_by:
                return False
            self._ask_by = mono + ASK_AGAIN_S
            return True

    def read(self, oldest_live: datetime | None, *, now: datetime, mono: float) -> None:
        """Record the floor read at ``now`` (and ``mono``, both taken before the statement
        ran): ``oldest_live`` is the oldest firing of a live run (None: there is none)."""
        floor = now - self._recent
        if oldest_live is not None:
            floor = min(floor, oldest_live)
        with self._lock:
            self._since = floor
            self._read_by = mono + self._read_every_s
