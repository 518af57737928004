"""A Clock whose instants follow PostgreSQL's clock, carried forward on the monotonic clock."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

from beat_engine.clock import Clock


class DatabaseClock:
    """RELIABILITY consequence 4: one authority for "is it due" across nodes.

    Every node reads the database's clock now and then and adds monotonic time elapsed since,
    so a node whose wall clock is skewed neither fires early nor expires leases wrongly.
    """

    def __init__(self, inner: Clock, *, resample_s: float = 60.0) -> None:
        self._inner = inner
        self._resample_s = resample_s
        self._base: datetime | None = None
        self._base_mono = 0.0

    def _sample(self) -> None:
        with connection.cursor() as cursor:
            sent = self._inner.monotonic()
            cursor.execute("SELECT clock_timestamp()")
            (db_now,) = cursor.fetchone()
            received = self._inner.monotonic()
        # The server read its clock somewhere in the round trip; the midpoint halves the error.
        self._base = db_now
        self._base_mono = (sent + received) / 2

    def now(self) -> datetime:
        mono = self._inner.monotonic()
        if self._base is None or mono - self._base_mono > self._resample_s:
            self._sample()
        assert self._base is not None
        return self._base + timedelta(seconds=self._inner.monotonic() - self._base_mono)

    def monotonic(self) -> float:
        return self._inner.monotonic()

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
