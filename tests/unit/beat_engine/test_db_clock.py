"""The database-clock sampler: carried forward on the monotonic clock, and safe to share by
threads (the engine's thread and its claim pipeline's, a worker's task threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from beat_engine.db_clock import DatabaseClock

DB_EPOCH = datetime(2026, 6, 1, tzinfo=UTC)


class ScriptedClock:
    """Monotonic time that moves when the test says; the wall clock is far off on purpose.

    ``on_call(n, hook)`` runs ``hook`` inside the n-th monotonic() call made by the thread that
    armed it, to land another thread's work between two steps of a reader.
    """

    def __init__(self) -> None:
        self.mono = 0.0
        self._armed: tuple[threading.Thread, int, Callable[[], None]] | None = None
        self._calls = 0

    def on_call(self, n: int, hook: Callable[[], None]) -> None:
        self._armed, self._calls = (threading.current_thread(), n, hook), 0

    def monotonic(self) -> float:
        if self._armed is not None and self._armed[0] is threading.current_thread():
            self._calls += 1
            if self._calls == self._armed[1]:
                hook = self._armed[2]
                self._armed = None
                hook()
        return self.mono

    def now(self) -> datetime:
        return datetime(1999, 1, 1, tzinfo=UTC)  # never what the sampler reports

    def sleep(self, seconds: float) -> None:
        self.mono += seconds


def _database(inner: ScriptedClock, reads: list[float]) -> Callable[[], datetime]:
    """A database whose clock runs exactly with the monotonic clock, counting its reads."""

    def read() -> datetime:
        reads.append(inner.mono)
        return DB_EPOCH + timedelta(seconds=inner.mono)

    return read


def test_now_follows_the_database_clock_not_the_local_wall_clock() -> None:
    inner, reads = ScriptedClock(), list[float]()
    clock = DatabaseClock(inner, resample_s=60, read=_database(inner, reads))

    assert clock.now() == DB_EPOCH
    inner.mono = 59.5
    assert clock.now() == DB_EPOCH + timedelta(seconds=59.5)
    assert reads == [0.0]  # carried forward, not read again
    inner.mono = 61
    assert clock.now() == DB_EPOCH + timedelta(seconds=61)
    assert reads == [0.0, 61]


def test_a_resample_between_a_readers_steps_never_tears_its_reading() -> None:
    # A reader has the current sample and is about to add the time elapsed since it, when the
    # other thread finds the sample stale and replaces it. The reader must not mix the old
    # sample's instant with the new sample's monotonic time (100 s wrong here).
    inner, reads = ScriptedClock(), list[float]()
    clock = DatabaseClock(inner, resample_s=60, read=_database(inner, reads))
    assert clock.now() == DB_EPOCH
    inner.mono = 30
    seen: list[datetime] = []

    def other_thread_resamples() -> None:
        inner.mono = 130
        thread = threading.Thread(target=lambda: seen.append(clock.now()))
        thread.start()
        thread.join(timeout=10)

    inner.on_call(2, other_thread_resamples)
    reading = clock.now()

    assert seen == [DB_EPOCH + timedelta(seconds=130)]
    assert reads == [0.0, 130]
    assert reading == DB_EPOCH + timedelta(seconds=130)


def test_threads_needing_a_sample_at_once_take_one_and_agree_on_it() -> None:
    # Two samplers at once could each store half of their sample (one's instant, the other's
    # monotonic time): a wrong clock until the next resample. One samples; the other waits.
    inner, reads = ScriptedClock(), list[float]()
    entered, release = threading.Event(), threading.Event()
    database = _database(inner, reads)

    def slow_read() -> datetime:
        entered.set()
        release.wait(10)
        return database()

    clock = DatabaseClock(inner, resample_s=60, read=slow_read)
    results: list[datetime] = []
    first = threading.Thread(target=lambda: results.append(clock.now()))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: results.append(clock.now()))
    second.start()
    second.join(timeout=0.2)
    release.set()
    first.join(timeout=10)
    second.join(timeout=10)

    assert reads == [0.0]
    assert results == [DB_EPOCH, DB_EPOCH]
