"""FakeClock: instants and monotonic time that move only when a test says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware start instant")
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, delta: timedelta) -> None:
        self._now += delta
        self._mono += delta.total_seconds()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(timedelta(seconds=seconds))
