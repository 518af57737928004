"""Each refresh reloads a slice of the partitions whole, in turn (beat_engine/reload_turns.py):
every partition comes round within full_refresh_s, and no refresh reloads them all."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.reload_turns import ReloadTurns


def test_thirty_two_partitions_are_reloaded_three_at_a_time_and_all_within_a_minute() -> None:
    turns = ReloadTurns(refresh_s=5.0, full_refresh_s=60.0)
    parts = list(range(0, 64, 2))

    slices = [turns.take(parts) for _ in range(11)]

    # 11 refreshes of 5 s, inside the minute, reload every partition; the round then wraps.
    assert [len(s) for s in slices] == [3] * 11
    assert {p for s in slices for p in s} == set(parts)
    assert slices[0] == [0, 2, 4]
    assert slices[1] == [6, 8, 10]
    assert slices[-1] == [60, 62, 0]
    assert turns.take(parts) == [2, 4, 6]


def test_a_full_refresh_period_at_most_the_refresh_reloads_every_partition_each_time() -> None:
    turns = ReloadTurns(refresh_s=1.0, full_refresh_s=1.0)

    assert turns.take([3, 1, 2]) == [1, 2, 3]
    assert turns.take([3, 1, 2]) == [1, 2, 3]


def test_partitions_lost_or_gained_between_refreshes_only_shift_the_turn() -> None:
    turns = ReloadTurns(refresh_s=5.0, full_refresh_s=20.0)

    assert turns.take([0, 1, 2, 3, 4, 5, 6, 7]) == [0, 1]
    # 2 was lost, 9 gained: the turn goes on after 1.
    assert turns.take([0, 1, 3, 4, 5, 6, 7, 9]) == [3, 4]
    assert turns.take([]) == []
    assert turns.take([5, 9]) == [5]


@given(
    parts=st.sets(st.integers(0, 255), min_size=1, max_size=64),
    refresh_s=st.sampled_from([1.0, 2.0, 5.0]),
    full_refresh_s=st.sampled_from([1.0, 7.0, 20.0, 60.0]),
)
def test_every_partition_comes_round_within_the_full_refresh_period(
    parts: set[int], refresh_s: float, full_refresh_s: float
) -> None:
    turns = ReloadTurns(refresh_s, full_refresh_s)
    # Refreshes that fit in full_refresh_s, rounded up to a whole one.
    rounds = max(1, math.ceil(full_refresh_s / refresh_s))
    per_refresh = math.ceil(len(parts) * min(1.0, refresh_s / full_refresh_s))

    for _ in range(3):
        seen: set[int] = set()
        for _ in range(rounds):
            got = turns.take(parts)
            assert len(got) == per_refresh
            seen.update(got)
        assert seen == parts
