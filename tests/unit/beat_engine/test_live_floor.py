"""The live floor's rules: when a pass is bounded, by what, and when it is read again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat_engine.live_floor import READ_EVERY_S, RECENT, LiveFloor

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def test_unbounded_until_the_floor_is_read() -> None:
    floor = LiveFloor()
    assert floor.due(0.0)
    assert floor.since([1, 2], 0.0) is None


def test_floor_is_the_oldest_live_firing_or_recent_whichever_is_older() -> None:
    floor = LiveFloor()
    floor.read([1, 2], NOW - timedelta(days=40), now=NOW, mono=0.0)
    assert floor.since([1, 2], 1.0) == NOW - timedelta(days=40)
    floor.read([1, 2], NOW - timedelta(hours=1), now=NOW, mono=2.0)
    assert floor.since([1, 2], 3.0) == NOW - RECENT
    floor.read([1, 2], None, now=NOW, mono=4.0)
    assert floor.since([1], 5.0) == NOW - RECENT


def test_read_again_every_interval_and_unbounded_once_overdue() -> None:
    floor = LiveFloor()
    floor.read([1], None, now=NOW, mono=100.0)
    assert not floor.due(100.0 + READ_EVERY_S - 0.001)
    assert floor.due(100.0 + READ_EVERY_S)
    # Still bounded while the next read is due (it comes with the next timer pass)...
    assert floor.since([1], 100.0 + READ_EVERY_S) is not None
    # ...but a floor that could not be read again for a whole interval is not trusted.
    assert floor.since([1], 100.0 + 2 * READ_EVERY_S) is None


def test_partitions_the_floor_never_saw_are_read_unbounded() -> None:
    floor = LiveFloor()
    floor.read([1, 2], None, now=NOW, mono=0.0)
    assert floor.since([2], 1.0) is not None
    assert floor.since([2, 3], 1.0) is None


def test_expire_makes_the_next_pass_read_the_floor_and_go_unbounded() -> None:
    floor = LiveFloor()
    floor.read([1], None, now=NOW, mono=0.0)
    floor.expire()
    assert floor.due(1.0)
    assert floor.since([1], 1.0) is None
