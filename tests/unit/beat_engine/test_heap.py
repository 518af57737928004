"""DueHeap: earliest first, one live entry per job, lazy invalidation."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.heap import DueEntry, DueHeap, interleave_by_tenant

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(seconds: float, partition: int = 0, job: uuid.UUID | None = None) -> DueEntry:
    return DueEntry(T0 + timedelta(seconds=seconds), job or uuid.uuid4(), partition)


def test_pop_due_returns_only_due_entries_earliest_first() -> None:
    heap = DueHeap()
    late, early, future = _entry(5), _entry(1), _entry(60)
    heap.push_many([late, future, early])
    assert heap.pop_due(T0 + timedelta(seconds=10), limit=10) == [early, late]
    assert heap.peek() == future
    assert len(heap) == 1


def test_pop_due_respects_the_batch_limit() -> None:
    heap = DueHeap()
    heap.push_many(_entry(i) for i in range(10))
    assert len(heap.pop_due(T0 + timedelta(seconds=100), limit=3)) == 3
    assert len(heap) == 7


def test_heap_discard_makes_stale_entry_invisible() -> None:
    heap = DueHeap()
    entry = _entry(1)
    heap.push(entry)
    heap.discard(entry.job_id)
    assert heap.peek() is None
    assert heap.pop_due(T0 + timedelta(days=1), limit=10) == []


def test_pushing_a_job_again_replaces_its_entry() -> None:
    heap = DueHeap()
    job = uuid.uuid4()
    heap.push(_entry(1, job=job))
    moved = _entry(30, job=job)
    heap.push(moved)
    assert heap.pop_due(T0 + timedelta(seconds=10), limit=10) == []
    assert heap.pop_due(T0 + timedelta(seconds=30), limit=10) == [moved]


def test_dropping_a_partition_forgets_its_entries_only() -> None:
    heap = DueHeap()
    kept = _entry(2, partition=1)
    heap.push_many([_entry(1, partition=0), kept, _entry(3, partition=0)])
    heap.drop_partitions([0])
    assert heap.pop_due(T0 + timedelta(seconds=10), limit=10) == [kept]


def test_many_replacements_do_not_grow_the_heap_without_bound() -> None:
    heap = DueHeap()
    job = uuid.uuid4()
    for i in range(10_000):
        heap.push(_entry(i, job=job))
        heap.peek()
    assert len(heap._heap) < 3000
    assert len(heap) == 1


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=60))
def test_pop_order_matches_a_sorted_list_of_the_last_push_per_job(
    pushes: list[tuple[int, int]],
) -> None:
    jobs = [uuid.UUID(int=i + 1) for i in range(51)]
    heap = DueHeap()
    latest: dict[uuid.UUID, DueEntry] = {}
    for job_index, seconds in pushes:
        entry = _entry(seconds, job=jobs[job_index])
        heap.push(entry)
        latest[entry.job_id] = entry
    popped = heap.pop_due(T0 + timedelta(days=1), limit=1000)
    assert [e.due_at for e in popped] == sorted(e.due_at for e in latest.values())
    assert {e.job_id for e in popped} == set(latest)


def test_interleave_by_tenant_takes_turns_and_keeps_each_tenants_order() -> None:
    crowd = [DueEntry(T0 + timedelta(seconds=i), uuid.uuid4(), 0, tenant=1) for i in range(5)]
    lone = DueEntry(T0 + timedelta(seconds=9), uuid.uuid4(), 0, tenant=2)
    ordered = interleave_by_tenant([*crowd, lone])
    assert ordered[:2] == [crowd[0], lone]
    assert [e for e in ordered if e.tenant == 1] == crowd
