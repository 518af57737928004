"""Runs held under backpressure: a tenant's own runs by priority, with the reserved share."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.backpressure import HeldRuns
from beat_engine.priority_order import ReservedShare, order_by_priority

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Run:
    priority: int
    tenant: int = 1
    queue: str = "q"
    partition: int = 0
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)


def test_a_tenants_low_priority_run_leaves_the_hold_behind_a_steady_stream_of_urgent_ones() -> None:
    held: HeldRuns[Run] = HeldRuns(0.1)
    low = [Run(9) for _ in range(5)]
    held.hold([*(Run(0) for _ in range(10)), *low], since=T0)
    out: list[Run] = []
    for _ in range(30):
        # Every release finds another urgent run of the same tenant just held.
        held.hold([Run(0)], since=T0)
        out.extend(held.release("q", 1))
    assert [r.priority for r in out].count(9) == 3
    assert [i for i, r in enumerate(out) if r.priority == 9] == [9, 19, 29]
    assert [r for r in out if r.priority == 9] == low[:3]


def test_with_no_share_the_hold_is_strict() -> None:
    held: HeldRuns[Run] = HeldRuns(0)
    held.hold([Run(9), *(Run(0) for _ in range(20))], since=T0)
    assert [r.priority for r in held.release("q", 20)] == [0] * 20


@given(
    st.fractions(min_value=0, max_value=Fraction(1, 2), max_denominator=20),
    st.lists(st.integers(0, 9), max_size=120),
    st.lists(st.integers(1, 9), max_size=30),
)
def test_one_tenants_hold_comes_out_in_the_claim_orders_priority_order(
    share: Fraction, priorities: list[int], rooms: list[int]
) -> None:
    held: HeldRuns[Run] = HeldRuns(share)
    runs = [Run(p) for p in priorities]
    held.hold(runs, since=T0)
    out: list[Run] = []
    for room in [*rooms, 10**6]:
        out.extend(held.release("q", room))
    expected = order_by_priority(runs, priority_of=lambda r: r.priority, share=ReservedShare(share))
    assert out == expected
    assert len(held) == 0
