"""A Clock whose instants follow PostgreSQL's clock, carried forward on the monotonic clock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection

from beat_engine.clock import Clock


def read_database_clock() -> datetime:
    """PostgreSQL's clock, on the calling thread's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


@dataclass(frozen=True)
class _Sample:
    # The database's instant and the monotonic time it was read at: one value, replaced whole,
    # so no reader can pair one sample's instant with another's monotonic time.
    at: datetime
    mono: float


class DatabaseClock:
    """One clock (docs/architecture.md, Invariants): what is due, when a lease expires and when
    a retry is due are judged on the database's clock, never a node's or a worker's own.

    Every process reads the database's clock now and then and adds monotonic time elapsed
    since, so a process whose wall clock is off neither fires early nor sets leases or retry
    times that the reaper and the timers, judging on the database's clock, would misread.

    Shared by threads (the engine's thread and its claim pipeline's; a worker's task threads):
    readers take the current sample in one read of one attribute, and one thread at a time
    takes a new sample while the others wait for it rather than each taking their own.
    """

    def __init__(
        self,
        inner: Clock,
        *,
        resample_s: float = 60.0,
        read: Callable[[], datetime] = read_database_clock,
    ) -> None:
        self._inner = inner
        self._resample_s = resample_s
        self._read = read
        self._sample: _Sample | None = None
        self._sampling = threading.Lock()

    def _fresh(self, sample: _Sample | None) -> bool:
        return sample is not None and self._inner.monotonic() - sample.mono <= self._resample_s

    def _current(self) -> _Sample:
        sample = self._sample
        if sample is not None and self._fresh(sample):
            return sample
        with self._sampling:
            # Another thread may have sampled while this one waited for the lock.
            sample = self._sample
            if sample is None or not self._fresh(sample):
                sent = self._inner.monotonic()
                at = self._read()
                received = self._inner.monotonic()
                # The server read its clock somewhere in the round trip; the midpoint halves
                # the error.
                sample = _Sample(at=at, mono=(sent + received) / 2)
                self._sample = sample
            return sample

    def now(self) -> datetime:
        sample = self._current()
        return sample.at + timedelta(seconds=self._inner.monotonic() - sample.mono)

    def monotonic(self) -> float:
        return self._inner.monotonic()

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
