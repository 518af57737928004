"""The live floor's rules: when a pass is bounded, by what, and when it is read again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat_engine.live_floor import ASK_AGAIN_S, READ_EVERY_S, RECENT, LiveFloor

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def test_unbounded_until_the_floor_is_read() -> None:
    floor = LiveFloor()
    assert floor.due(0.0)
    assert floor.since(0.0) is None


def test_floor_is_the_oldest_live_firing_or_recent_whichever_is_older() -> None:
    floor = LiveFloor()
    floor.read(NOW - timedelta(days=40), now=NOW, mono=0.0)
    assert floor.since(1.0) == NOW - timedelta(days=40)
    floor.read(NOW - timedelta(hours=1), now=NOW, mono=2.0)
    assert floor.since(3.0) == NOW - RECENT
    floor.read(None, now=NOW, mono=4.0)
    assert floor.since(5.0) == NOW - RECENT


def test_read_again_every_interval_and_unbounded_once_overdue() -> None:
    floor = LiveFloor()
    floor.read(None, now=NOW, mono=100.0)
    assert not floor.due(100.0 + READ_EVERY_S - 0.001)
    assert floor.due(100.0 + READ_EVERY_S)
    # Still bounded while the next read runs on its thread...
    assert floor.since(100.0 + READ_EVERY_S) is not None
    # ...but a floor that could not be read again for a whole interval is not trusted.
    assert floor.since(100.0 + 2 * READ_EVERY_S) is None


def test_one_read_asked_for_at_a_time_and_a_lost_one_asked_for_again() -> None:
    floor = LiveFloor()
    assert floor.due(0.0)
    # Asked for: the passes until it is recorded do not ask again...
    assert not floor.due(0.5)
    assert not floor.due(ASK_AGAIN_S - 0.001)
    # ...until a read that never came (it failed) is asked for again.
    assert floor.due(ASK_AGAIN_S)
    floor.read(None, now=NOW, mono=ASK_AGAIN_S + 1)
    assert not floor.due(ASK_AGAIN_S + 2)
