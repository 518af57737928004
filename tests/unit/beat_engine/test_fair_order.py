"""FairDueHeap: DueHeap's contract, with due entries handed out in fair rounds by tenant."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.fair_order import FairDueHeap
from beat_engine.heap import DueEntry, DueHeap

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(seconds: float, tenant: int = 1, partition: int = 0, job: uuid.UUID | None = None):
    return DueEntry(T0 + timedelta(seconds=seconds), job or uuid.uuid4(), partition, tenant)


def test_a_lone_tenants_firing_pushed_last_is_in_the_first_batch() -> None:
    """200,000 firings of one tenant due at the instant and one of another's, pushed after
    them (its horizon page loaded last): the lone one is in the first claim batch."""
    heap = FairDueHeap()
    heap.push_many(_entry(0, tenant=1) for _ in range(20_000))
    lone = _entry(0, tenant=2)
    heap.push(lone)
    first = heap.pop_due(T0, 1000)
    assert lone.job_id in {e.job_id for e in first[:2]}
    assert len(first) == 1000
    assert {e.tenant for e in first} == {1, 2}


def test_rounds_take_one_of_each_due_tenant_earlier_instant_first() -> None:
    heap = FairDueHeap()
    a = [_entry(i, tenant=1) for i in range(5)]
    b = [_entry(10 + i, tenant=2) for i in range(2)]
    c = [_entry(0.5, tenant=3)]
    heap.push_many([*a, *b, *c])
    order = heap.pop_due(T0 + timedelta(seconds=60), 100)
    expected = [a[0], c[0], b[0], a[1], b[1], a[2], a[3], a[4]]
    assert [e.job_id for e in order] == [e.job_id for e in expected]


def test_the_rounds_go_on_across_calls_while_the_drain_lasts() -> None:
    heap = FairDueHeap()
    a = [_entry(0, tenant=1) for _ in range(6)]
    b = [_entry(0, tenant=2) for _ in range(6)]
    heap.push_many([*a, *b])
    batches = [heap.pop_due(T0, 3) for _ in range(4)]
    flat = [e.tenant for batch in batches for e in batch]
    # Alternating over the batch boundaries: never two of one tenant in a row.
    assert all(x != y for x, y in itertools.pairwise(flat))
    assert len(flat) == 12


def test_a_tenant_due_mid_drain_joins_the_current_round() -> None:
    """It goes within one turn of the big tenant (not behind its backlog), and does not then
    take every turn until its count catches up with the big tenant's."""
    heap = FairDueHeap()
    heap.push_many(_entry(0, tenant=1) for _ in range(100))
    assert {e.tenant for e in heap.pop_due(T0 + timedelta(seconds=5), 50)} == {1}
    late = [_entry(5, tenant=2) for _ in range(10)]
    heap.push_many(late)
    order = [e.tenant for e in heap.pop_due(T0 + timedelta(seconds=5), 10)]
    assert order.index(2) <= 1
    assert order.count(2) == 5


def test_a_drain_that_ends_starts_the_next_one_afresh() -> None:
    heap = FairDueHeap()
    heap.push_many(_entry(0, tenant=1) for _ in range(10))
    assert len(heap.pop_due(T0, 100)) == 10
    heap.push_many([_entry(1, tenant=2), _entry(1, tenant=2), _entry(0.5, tenant=1)])
    assert [e.tenant for e in heap.pop_due(T0 + timedelta(seconds=1), 100)] == [1, 2, 2]


def test_discarded_and_replaced_entries_are_never_handed_out() -> None:
    heap = FairDueHeap()
    job = uuid.uuid4()
    heap.push(_entry(1, tenant=1, job=job))
    gone = _entry(0, tenant=2)
    heap.push(gone)
    heap.discard(gone.job_id)
    moved = _entry(30, tenant=1, job=job)
    heap.push(moved)
    assert heap.peek() is moved
    assert heap.pop_due(T0 + timedelta(seconds=10), 10) == []
    assert [e.job_id for e in heap.pop_due(T0 + timedelta(seconds=30), 10)] == [job]
    assert len(heap) == 0
    assert heap.peek() is None


def test_dropping_a_partition_forgets_its_entries_only() -> None:
    heap = FairDueHeap()
    kept = _entry(2, tenant=2, partition=1)
    heap.push_many([_entry(1, partition=0), kept, _entry(3, tenant=2, partition=0)])
    heap.drop_partitions([0])
    assert [e.job_id for e in heap.pop_due(T0 + timedelta(seconds=10), 10)] == [kept.job_id]


# An operation: push (job index, seconds, tenant), discard a job, pop at an instant.
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 30), st.integers(0, 20), st.integers(1, 4)),
        st.tuples(st.just("discard"), st.integers(0, 30)),
        st.tuples(st.just("pop"), st.integers(0, 25), st.integers(1, 8)),
        st.tuples(st.just("behind"), st.integers(0, 25), st.integers(1, 8)),
        st.tuples(st.just("drop"), st.integers(0, 2)),
    ),
    max_size=120,
)


@given(_ops)
def test_it_holds_and_hands_out_the_same_entries_as_the_due_heap(ops: list[tuple]) -> None:
    """Whatever the interleaving: the same live entries, the same earliest (peek), every pop
    due at its instant and taken from what the due heap would have had due, each tenant's
    entries in their own due order, and every due entry handed out once."""
    fair, plain = FairDueHeap(), DueHeap()
    jobs = [uuid.uuid4() for _ in range(31)]
    for op in ops:
        if op[0] == "push":
            entry = _entry(op[2], tenant=op[3], partition=op[1] % 3, job=jobs[op[1]])
            fair.push(entry)
            plain.push(entry)
        elif op[0] == "discard":
            fair.discard(jobs[op[1]])
            plain.discard(jobs[op[1]])
        elif op[0] == "drop":
            fair.drop_partitions([op[1]])
            plain.drop_partitions([op[1]])
        else:
            now = T0 + timedelta(seconds=op[1])
            due = plain.pop_due(now, 10_000)
            if op[0] == "behind":
                got = fair.pop_behind(now, op[2])
                assert len(got) <= op[2]
                assert len({e.tenant for e in got}) == len(got)
            else:
                got = fair.pop_due(now, op[2])
                assert len(got) == min(op[2], len(due))
            # As the engine does: what was handed out goes into a claim batch, and the rounds
            # claimed move on (what pop_behind measures against).
            fair.claiming(got)
            due_jobs = {e.job_id: e for e in due}
            assert all(due_jobs.get(e.job_id) is e for e in got)
            for tenant in {e.tenant for e in got}:
                mine = [e for e in got if e.tenant == tenant]
                assert mine == sorted(mine)
            # The due entries the fair heap did not hand out stay in both.
            handed = {e.job_id for e in got}
            plain.push_many(e for e in due if e.job_id not in handed)
        assert len(fair) == len(plain)
        head = fair.peek()
        assert (head.due_at if head else None) == (p.due_at if (p := plain.peek()) else None)


def test_a_firing_due_after_the_window_was_taken_comes_out_ahead_of_its_rest() -> None:
    """A window of the big tenant's entries is being claimed; the lone tenant's next firing
    falls due meanwhile: pop_behind hands it out (once), not the big tenant's next one."""
    heap = FairDueHeap()
    heap.push_many(_entry(0, tenant=1) for _ in range(100))
    first = _entry(0, tenant=2)
    heap.push(first)
    window = heap.pop_due(T0 + timedelta(seconds=10), 50)
    assert first.job_id in {e.job_id for e in window[:2]}
    heap.claiming(window[:10])
    assert heap.pop_behind(T0 + timedelta(seconds=10), 10) == []
    later = _entry(10, tenant=2)
    heap.push(later)
    assert [e.job_id for e in heap.pop_behind(T0 + timedelta(seconds=10), 10)] == [later.job_id]
    assert heap.pop_behind(T0 + timedelta(seconds=10), 10) == []
    assert {e.tenant for e in heap.pop_due(T0 + timedelta(seconds=10), 10)} == {1}


def test_a_lone_tenants_every_firing_during_one_window_comes_out_one_batch_after_it() -> None:
    """The window of a big tenant's burst is claimed batch by batch for many seconds; the lone
    tenant's job falls due again and again meanwhile: each firing goes into the next batch,
    not behind the rest of the window (the engine's order: pop_behind, then the batch)."""
    heap = FairDueHeap()
    heap.push_many(_entry(0, tenant=1) for _ in range(1000))
    heap.push(_entry(0, tenant=2))
    now = T0 + timedelta(seconds=1)
    backlog = heap.pop_due(now, 500)
    first, backlog = backlog[:10], backlog[10:]
    assert 2 in {e.tenant for e in first}
    heap.claiming(first)
    for _batch in range(12):
        now += timedelta(seconds=1)
        later = _entry((now - T0).total_seconds(), tenant=2)
        heap.push(later)
        ahead = heap.pop_behind(now, 10)
        # The lone tenant's new firing, and never the big tenant's next entries.
        assert [e.job_id for e in ahead] == [later.job_id]
        backlog[:0] = ahead
        batch, backlog = backlog[:10], backlog[10:]
        assert batch[0] is later
        heap.claiming(batch)
    assert len(backlog) == 490 - 12 * 10 + 12
    assert {e.tenant for e in backlog} == {1}


def test_nothing_is_behind_when_no_drain_is_on() -> None:
    heap = FairDueHeap()
    heap.push(_entry(0, tenant=1))
    assert heap.pop_behind(T0, 10) == []
    assert len(heap) == 1


def test_a_tenant_listed_twice_is_handed_out_behind_once() -> None:
    """A tenant's next entry listed again after an earlier one was pushed ahead of it and
    handed out (two copies of its listing in the heads): pop_behind takes it once, and the
    tenant's next entry stays."""
    heap = FairDueHeap()
    later = _entry(10, tenant=1)
    heap.push(later)
    heap.push(_entry(0, tenant=1))  # ahead of ``later``: listed, ``later``'s listing kept
    heap.push_many(_entry(0, tenant=2) for _ in range(5))
    first = heap.pop_due(T0, 3)  # tenant 1's first (``later`` listed again), two of tenant 2's
    heap.claiming(first)
    after = _entry(10, tenant=1)
    heap.push(after)
    behind = heap.pop_behind(T0 + timedelta(seconds=10), 10)
    assert [e.tenant for e in behind] == [1]
    assert behind[0].job_id in {later.job_id, after.job_id}
    assert len(heap) == 3 + 1
