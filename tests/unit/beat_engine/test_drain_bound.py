"""The adaptive queue bound: the drain rate from depth readings, and the bound it gives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from beat_engine.drain_bound import DrainBound
from tests.support.clock import FakeClock


class Queue:
    """A broker queue drained by workers at ``rate`` messages/s while it has any, and the node
    that reads its depth every ``poll_s`` and pushes what the bound lets through."""

    def __init__(self, bounds: DrainBound, clock: FakeClock, rate: float, backlog: int) -> None:
        self.bounds, self.clock, self.rate = bounds, clock, rate
        self.depth = 0.0
        self.pushed = 0
        self.backlog = backlog  # runs held by the node, waiting for room

    def step(self, poll_s: float = 0.1) -> int:
        self.clock.advance(timedelta(seconds=poll_s))
        self.depth = max(0.0, self.depth - self.rate * poll_s)
        bound = self.bounds.observed(
            "q", depth=int(self.depth), pushed=self.pushed, mono=self.clock.monotonic(),
            holding=self.backlog > 0,
        )  # fmt: skip
        room = min(self.backlog, max(0, bound - int(self.depth)))
        self.depth += room
        self.pushed += room
        self.backlog -= room
        return bound


def test_the_floor_until_the_drain_is_measured() -> None:
    bounds = DrainBound(cap=100_000, target_wait_s=1.0, floor=50)
    assert bounds.bound("q") == 50
    assert bounds.rate("q") is None


def test_slow_workers_get_a_bound_of_about_one_second_of_their_work() -> None:
    clock = FakeClock()
    bounds = DrainBound(cap=100_000, target_wait_s=1.0, floor=10)
    queue = Queue(bounds, clock, rate=40.0, backlog=100_000)
    for _ in range(100):
        bound = queue.step()
    rate = bounds.rate("q")
    assert rate is not None
    assert 36 <= rate <= 44
    assert 36 <= bound <= 44
    # What waits in the broker is about one second of the workers' work, not the cap.
    assert queue.depth <= 44


def test_a_fast_queue_is_not_held_to_the_floor() -> None:
    clock = FakeClock()
    bounds = DrainBound(cap=100_000, target_wait_s=1.0, floor=50)
    queue = Queue(bounds, clock, rate=10_000.0, backlog=10**7)
    bounds_seen = [queue.step() for _ in range(60)]
    # The queue ran dry at the floor: the bound doubled until the workers always had work,
    # then settled at about a second of their rate.
    assert bounds_seen[:3] == [50, 100, 200]
    assert 9_000 <= bounds_seen[-1] <= 11_000
    # From then on every reading finds messages waiting: the workers never idled.
    for _ in range(30):
        queue.step()
        assert queue.depth > 0


def test_the_bound_shrinks_when_the_workers_slow_down() -> None:
    clock = FakeClock()
    bounds = DrainBound(cap=100_000, target_wait_s=1.0, floor=10)
    queue = Queue(bounds, clock, rate=2_000.0, backlog=10**7)
    for _ in range(60):
        queue.step()
    assert bounds.bound("q") >= 1_800
    queue.rate = 100.0
    for _ in range(300):
        bound = queue.step()
    assert 90 <= bound <= 110


def test_a_queue_nobody_takes_from_gets_the_cap_after_the_stall_time() -> None:
    clock = FakeClock()
    bounds = DrainBound(cap=1_000, target_wait_s=1.0, floor=50, stall_s=10.0)
    queue = Queue(bounds, clock, rate=0.0, backlog=10_000)
    # Under 10 s without a message taken since the first reading (the queue was empty then):
    # the floor (workers may just be slow to start).
    for _ in range(40):
        assert queue.step(0.25) == 50
    assert queue.depth == 50
    assert bounds.rate("q") == 0.0
    # 10 s: no worker reads the queue; the cap bounds Redis's memory, as the fixed bound does.
    assert queue.step(0.25) == 1_000
    assert queue.depth == 1_000
    assert bounds.bound("q") == 1_000
    # Workers again: the bound follows their rate once a window measured it.
    queue.rate = 100.0
    for _ in range(40):
        queue.step()
    assert 90 <= bounds.bound("q") <= 110


def test_an_idle_queue_keeps_its_bound() -> None:
    """Readings of an empty queue with nothing held measure no drain: the bound learned under
    load stays (an idle hour is no evidence the workers got slower)."""
    clock = FakeClock()
    bounds = DrainBound(cap=100_000, target_wait_s=1.0, floor=10)
    queue = Queue(bounds, clock, rate=500.0, backlog=10**6)
    for _ in range(60):
        queue.step()
    learned = bounds.bound("q")
    assert learned >= 450
    queue.backlog = 0
    for _ in range(100):
        queue.step()
    assert bounds.bound("q") == learned


def test_the_cap_and_two_reads_at_one_instant() -> None:
    clock = FakeClock()
    bounds = DrainBound(cap=300, target_wait_s=1.0, floor=50)
    queue = Queue(bounds, clock, rate=10_000.0, backlog=10**7)
    for _ in range(30):
        assert queue.step() <= 300
    assert bounds.bound("q") == 300
    mono = clock.monotonic()
    bounds.observed("q", depth=5, pushed=queue.pushed, mono=mono, holding=True)
    assert bounds.observed("q", depth=5, pushed=queue.pushed, mono=mono, holding=True) == 300


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        DrainBound(cap=100, target_wait_s=0.0)


@given(
    rate=st.floats(min_value=5.0, max_value=5_000.0),
    # At least twice the poll: a shorter target wait is shorter than the node can refill.
    target=st.floats(min_value=0.5, max_value=5.0),
    poll=st.sampled_from([0.05, 0.1, 0.25]),
)
def test_at_a_steady_rate_the_bound_is_about_rate_times_the_target_wait(
    rate: float, target: float, poll: float
) -> None:
    # A second's work of at least 20 messages (the default floor is 50): below that the
    # integer depths of a few messages decide more than the rate does.
    assume(rate * target >= 20)
    clock = FakeClock()
    bounds = DrainBound(cap=10**6, target_wait_s=target, floor=1)
    queue = Queue(bounds, clock, rate=rate, backlog=10**9)
    for _ in range(int(20 / poll)):
        queue.step(poll)
    wanted = rate * target
    # Integer depths and polls of whole messages: within 10 % and two messages of the ideal,
    # or at the poll's worth where one second of work is less than one poll keeps busy.
    assert bounds.bound("q") <= max(wanted * 1.1 + 2, 2 * rate * poll + 2)
    assert bounds.bound("q") >= min(wanted * 0.9 - 2, rate * poll)
