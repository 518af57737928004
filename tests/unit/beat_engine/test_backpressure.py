"""Backpressure: the room a queue has below its bound, and held runs handed out fairly."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.backpressure import HeldRuns, QueueRoom

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Run:
    tenant: int
    queue: str = "q"
    priority: int = 5
    partition: int = 0
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)


def test_no_read_while_the_estimate_leaves_room_and_a_read_once_it_might_not() -> None:
    room = QueueRoom(100)
    assert room.must_read("q", 10)  # nothing known yet
    room.observed("q", 0)
    assert not room.must_read("q", 100)
    room.pushed("q", 90)
    assert room.room("q") == 10
    assert not room.must_read("q", 10)
    assert room.must_read("q", 11)
    room.observed("q", 40)  # workers took 50 meanwhile
    assert room.room("q") == 60


def test_a_bound_of_zero_is_no_bound() -> None:
    room = QueueRoom(0)
    assert not room.enabled
    assert not room.must_read("q", 10**9)
    assert room.room("q") >= 10**9


def test_a_lone_tenants_run_held_after_a_crowds_goes_out_in_the_first_release() -> None:
    held: HeldRuns[Run] = HeldRuns()
    crowd = [Run(tenant=1) for _ in range(1000)]
    lone = Run(tenant=2)
    held.hold(crowd, since=T0)
    held.hold([lone], since=T0 + timedelta(seconds=5))
    first = held.release("q", 10)
    assert lone in first[:2]
    assert len(first) == 10
    assert len(held) == 991


def test_a_tenants_own_runs_go_highest_priority_first_then_oldest_first() -> None:
    held: HeldRuns[Run] = HeldRuns()
    runs = [Run(tenant=1, priority=p) for p in (5, 9, 0, 5)]
    held.hold(runs, since=T0)
    assert held.release("q", 10) == [runs[2], runs[0], runs[3], runs[1]]
    assert not held.waiting("q")


def test_the_rounds_go_on_across_releases_and_a_newcomer_joins_the_current_one() -> None:
    held: HeldRuns[Run] = HeldRuns()
    held.hold([Run(tenant=1) for _ in range(50)], since=T0)
    assert {r.tenant for r in held.release("q", 20)} == {1}
    held.hold([Run(tenant=2) for _ in range(10)], since=T0)
    order = [r.tenant for r in held.release("q", 10)]
    assert order.index(2) <= 1
    assert order.count(2) == 5


def test_a_run_is_held_once_however_often_it_is_offered() -> None:
    held: HeldRuns[Run] = HeldRuns()
    run = Run(tenant=1)
    assert held.hold([run], since=T0) == 1
    assert held.hold([run], since=T0) == 0
    assert held.release("q", 10) == [run]
    assert held.release("q", 10) == []


def test_the_oldest_queued_bound_follows_what_is_still_held() -> None:
    held: HeldRuns[Run] = HeldRuns()
    early, late = Run(tenant=1), Run(tenant=2)
    held.hold([early], since=T0)
    held.hold([late], since=T0 + timedelta(seconds=9))
    assert held.oldest_since() == T0
    assert held.release("q", 1) == [early]
    assert held.oldest_since() == T0 + timedelta(seconds=9)
    held.release("q", 1)
    assert held.oldest_since() is None


def test_partitions_given_up_take_their_held_runs_with_them() -> None:
    held: HeldRuns[Run] = HeldRuns()
    mine, theirs = Run(tenant=1, partition=1), Run(tenant=1, partition=2)
    other_queue = Run(tenant=3, queue="r", partition=2)
    held.hold([mine, theirs, other_queue], since=T0)
    assert sorted(r.run_id for r in held.drop_partitions([2])) == sorted(
        [theirs.run_id, other_queue.run_id]
    )
    assert held.queues() == ["q"]
    assert theirs.run_id not in held
    assert held.release("q", 10) == [mine]


@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from("qr")), max_size=80),
    st.lists(st.integers(0, 7), max_size=30),
)
def test_every_held_run_comes_out_once_and_no_tenant_gets_two_turns_ahead(
    arrivals: list[tuple[int, str]], rooms: list[int]
) -> None:
    held: HeldRuns[Run] = HeldRuns()
    runs = [Run(tenant=t, queue=q) for t, q in arrivals]
    held.hold(runs, since=T0)
    out: list[Run] = []
    for room in [*rooms, 10**6]:
        for queue in ("q", "r"):
            batch = held.release(queue, room)
            assert len(batch) <= room
            out.extend(batch)
    assert sorted(r.run_id for r in out) == sorted(r.run_id for r in runs)
    assert len(held) == 0
    assert held.oldest_since() is None
    # Within a queue, a tenant is served its (k+1)-th time only once every tenant still
    # waiting was served k times.
    for queue in ("q", "r"):
        served = [r.tenant for r in out if r.queue == queue]
        waiting = {t: sum(1 for r in runs if r.queue == queue and r.tenant == t) for t in served}
        counts: dict[int, int] = dict.fromkeys(waiting, 0)
        for tenant in served:
            counts[tenant] += 1
            still = [t for t in counts if counts[t] < waiting[t] or t == tenant]
            assert counts[tenant] - min(counts[t] for t in still) <= 1
