"""Priority order with a reserved share: strict order otherwise, the share over any interleaving."""

from __future__ import annotations

import math
from collections import Counter, deque
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beat_engine.priority_order import (
    BROKER_STEPS,
    HIGHEST,
    LOWEST,
    ReservedShare,
    as_share,
    order_by_priority,
    pick,
    scan_order,
)

shares = st.fractions(min_value=0, max_value=Fraction(1, 2), max_denominator=50)
levels = st.integers(min_value=HIGHEST, max_value=LOWEST)
# An interleaving: an arrival at a priority, or a pick (None).
events = st.lists(st.one_of(levels, st.none()), max_size=300)


def consume(share: ReservedShare, interleaving: list[int | None]) -> list[tuple[set[int], int]]:
    """A consumer of per-priority FIFO lists: (priorities waiting, priority served) per pick."""
    waiting: Counter[int] = Counter()
    served: list[tuple[set[int], int]] = []
    for event in interleaving:
        if event is not None:
            waiting[event] += 1
            continue
        present = {level for level, n in waiting.items() if n}
        if not present:
            continue
        level = pick(present, lowest_first=share.lowest_first())
        share.taken()
        waiting[level] -= 1
        served.append((present, level))
    return served


@given(shares, events)
def test_every_pick_is_the_highest_waiting_except_the_reserved_turns(
    value: Fraction, interleaving: list[int | None]
) -> None:
    served = consume(ReservedShare(value), interleaving)
    turns = ReservedShare(value)
    for present, level in served:
        reserved = turns.lowest_first()
        turns.taken()
        assert level == (max(present) if reserved else min(present))


@given(shares, events)
def test_the_lowest_waiting_gets_its_share_of_every_contended_window(
    value: Fraction, interleaving: list[int | None]
) -> None:
    served = consume(ReservedShare(value), interleaving)
    contended = [(present, level) for present, level in served if len(present) > 1]
    # Windows of consecutive picks during which at least two priorities waited.
    for start in range(len(served)):
        lowest = 0
        for k, (present, level) in enumerate(served[start:], start=1):
            if len(present) < 2:
                break
            lowest += level == max(present)
            assert math.floor(value * k) <= lowest <= math.ceil(value * k)
    if value == 0:
        assert all(level == min(present) for present, level in contended)


@given(shares, st.integers(min_value=1, max_value=200))
def test_a_low_run_behind_a_steady_stream_of_urgent_ones_waits_at_most_one_over_the_share(
    value: Fraction, backlog: int
) -> None:
    share = ReservedShare(value)
    # Every pick finds new urgent work waiting; one lowest-priority run waits from the start.
    interleaving: list[int | None] = [LOWEST]
    for _ in range(backlog):
        interleaving += [HIGHEST, None]
    served = [level for _present, level in consume(share, interleaving)]
    if value == 0:
        assert LOWEST not in served
    elif backlog >= math.ceil(1 / value):
        assert LOWEST in served[: math.ceil(1 / value)]


@given(shares, st.lists(levels, max_size=200))
def test_order_by_priority_serves_a_backlog_as_the_consumer_does(
    value: Fraction, priorities: list[int]
) -> None:
    items = list(enumerate(priorities))
    ordered = order_by_priority(items, priority_of=lambda item: item[1], share=ReservedShare(value))
    assert sorted(ordered) == items
    # Stable within a priority.
    for level in set(priorities):
        same = [index for index, p in ordered if p == level]
        assert same == sorted(same)
    # The same choices as a consumer that finds the whole backlog waiting.
    served = consume(ReservedShare(value), [*priorities, *([None] * len(priorities))])
    assert [p for _index, p in ordered] == [level for _present, level in served]


@given(shares, st.lists(levels, min_size=1, max_size=100))
def test_the_turns_go_on_across_calls_whatever_the_backlog(
    value: Fraction, priorities: list[int]
) -> None:
    """One ReservedShare over two backlogs takes the turns it would take over their sum."""
    once, twice = ReservedShare(value), ReservedShare(value)
    order_by_priority(priorities, priority_of=int, share=once)
    order_by_priority(priorities[:1], priority_of=int, share=twice)
    order_by_priority(priorities[1:], priority_of=int, share=twice)
    assert once.lowest_first() == twice.lowest_first()


@given(st.sets(levels, min_size=1), st.booleans())
def test_a_consumer_scanning_its_lists_in_scan_order_serves_the_pick(
    present: set[int], lowest_first: bool
) -> None:
    first = next(s for s in scan_order(BROKER_STEPS, lowest_first=lowest_first) if s in present)
    assert first == pick(present, lowest_first=lowest_first)


def test_one_in_ten_with_a_tenth() -> None:
    ordered = order_by_priority([0] * 27 + [9] * 3, priority_of=int, share=ReservedShare(0.1))
    assert [i for i, p in enumerate(ordered) if p == 9] == [9, 19, 29]
    assert deque(ordered).count(0) == 27


@pytest.mark.parametrize("value", [-0.1, 0.51, 1.0])
def test_a_share_outside_zero_to_one_half_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match="share"):
        as_share(value)
