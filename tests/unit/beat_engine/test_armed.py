"""ArmedRuns: runs claimed ahead are handed out at their instant, earliest first, with their
jobs' next firings; partitions dropped take their runs with them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from beat_engine.armed import ArmedRuns
from beat_engine.heap import DueEntry
from beat_engine.publisher import QueuedRun

T = datetime(2026, 1, 1, tzinfo=UTC)


def _run(at: datetime, partition: int = 0) -> QueuedRun:
    return QueuedRun(uuid.uuid4(), 1, partition, "q", 5, at)


def test_a_run_comes_out_at_its_instant_with_its_jobs_next_firing() -> None:
    armed = ArmedRuns()
    job = uuid.uuid4()
    run = _run(T)
    following = DueEntry(T + timedelta(minutes=1), job, 0)
    armed.arm(run, job, ("q", "message", 7), following)

    assert armed.next_due() == T
    assert armed.holds_job(job)
    assert armed.pop_due(T - timedelta(microseconds=1)).runs == []
    due = armed.pop_due(T)
    assert (due.runs, due.rendered, due.staged) == ([run], {run.run_id: ("q", "message", 7)}, [])
    assert armed.release(due) == [following]
    assert len(armed) == 0
    assert armed.next_due() is None
    assert not armed.holds_job(job)


def test_a_reloaded_job_keeps_its_run_but_not_its_next_firing() -> None:
    armed = ArmedRuns()
    job = uuid.uuid4()
    run = _run(T)
    armed.arm(run, job, None, DueEntry(T + timedelta(minutes=1), job, 0))

    armed.forget_following([job])

    due = armed.pop_due(T)
    assert (due.runs, due.rendered) == ([run], {})
    assert armed.release(due) == []


def test_dropped_partitions_take_their_runs_and_next_firings() -> None:
    armed = ArmedRuns()
    kept, dropped = _run(T, partition=1), _run(T, partition=2)
    job_kept, job_dropped = uuid.uuid4(), uuid.uuid4()
    armed.arm(kept, job_kept, None, DueEntry(T, job_kept, 1))
    armed.arm(dropped, job_dropped, None, DueEntry(T, job_dropped, 2))

    armed.drop_partitions([2])

    due = armed.pop_due(T)
    assert due.runs == [kept]
    assert [e.job_id for e in armed.release(due)] == [job_kept]


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=50), st.integers(0, 10_000))
def test_pop_due_hands_out_exactly_the_runs_due_earliest_first(
    offsets_ms: list[int], cut_ms: int
) -> None:
    armed = ArmedRuns()
    runs = [_run(T + timedelta(milliseconds=ms)) for ms in offsets_ms]
    for run in runs:
        armed.arm(run, uuid.uuid4())
    cut = T + timedelta(milliseconds=cut_ms)

    due = armed.pop_due(cut)
    armed.release(due)
    out = due.runs

    assert sorted(r.run_id for r in out) == sorted(r.run_id for r in runs if r.due_at <= cut)
    assert [r.due_at for r in out] == sorted(r.due_at for r in out)
    assert len(armed) == len(runs) - len(out)
    rest = armed.next_due()
    assert rest is None or rest > cut


def test_a_run_armed_again_comes_out_once_at_its_latest_instant() -> None:
    armed = ArmedRuns()
    first = _run(T)
    again = QueuedRun(first.run_id, 1, 0, "q", 5, T + timedelta(seconds=1))
    armed.arm(first, uuid.uuid4())
    armed.arm(again, uuid.uuid4())

    assert len(armed) == 1
    assert armed.next_due() == again.due_at
    assert armed.pop_due(T).runs == []
    assert armed.pop_due(again.due_at).runs == [again]
    assert armed.next_due() is None


def test_runs_of_one_instant_come_out_in_the_order_they_were_armed() -> None:
    armed = ArmedRuns()
    runs = [_run(T, partition=i % 3) for i in range(9)]
    for run in runs:
        armed.arm(run, uuid.uuid4())

    armed.drop_partitions([1])

    assert armed.pop_due(T).runs == [r for r in runs if r.partition != 1]


def test_an_instant_left_empty_by_a_drop_is_not_due_any_more() -> None:
    armed = ArmedRuns()
    armed.arm(_run(T, partition=1), uuid.uuid4())
    later = _run(T + timedelta(seconds=5), partition=2)
    armed.arm(later, uuid.uuid4())

    armed.drop_partitions([1])

    assert armed.next_due() == later.due_at


def test_a_partition_dropped_during_the_push_keeps_its_next_firings_out_of_the_heap() -> None:
    armed = ArmedRuns()
    kept, dropped = _run(T, partition=1), _run(T, partition=2)
    job_kept, job_dropped = uuid.uuid4(), uuid.uuid4()
    armed.arm(kept, job_kept, None, DueEntry(T, job_kept, 1))
    armed.arm(dropped, job_dropped, None, DueEntry(T, job_dropped, 2))
    due = armed.pop_due(T)

    # The push found partition 2 fenced out: the engine dropped it before releasing.
    armed.drop_partitions([2])

    assert [e.job_id for e in armed.release(due)] == [job_kept]
    assert len(armed) == 0


def test_a_run_is_held_until_released_and_counted_once() -> None:
    armed = ArmedRuns()
    run = _run(T)
    armed.arm(run, uuid.uuid4())
    due = armed.pop_due(T)

    assert run.run_id in armed
    armed.release(due)
    assert run.run_id not in armed
    assert len(armed) == 0
