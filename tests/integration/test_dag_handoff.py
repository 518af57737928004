"""The hand-off in PostgreSQL: children's runs written with the parent's deciding outcome.

Service level, real PostgreSQL, no worker: outcomes are recorded through jobs.services.runs as a
worker records them; the end-to-end paths with workers and the engine are in test_dag_runs.py.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg
import pytest
import redis
from django.db import connection, transaction

from beat_engine.clock import SystemClock
from beat_engine.notifications import ChangeFeed
from jobs.models import JobRun, RunTrigger
from jobs.services import dag_handoff, runs
from jobs.services.dead_letters import dead_letter_replay
from jobs.services.jobs import job_trigger_now
from jobs.states import RunState
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.dags import (
    YEARLY,
    dag_jobs,
    run_for,
    running,
    start,
    states_for,
    succeed,
    the_run,
)
from tests.support.factories import dead_run_factory, job_factory, run_factory
from tests.support.waiting import test_database_url, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PENDING, UPSTREAM_FAILED = RunState.PENDING.value, RunState.UPSTREAM_FAILED.value


def _now() -> datetime:
    return SystemClock().now()


def _dead(run: JobRun, *, now: datetime) -> None:
    assert runs.run_dead_letter(run_id=run.id, attempt=run.attempt, error="boom", now=now)


def test_success_creates_the_childs_run_for_the_same_logical_time_due_at_the_finish() -> None:
    now = _now()
    t = now.replace(microsecond=0) - timedelta(minutes=5)
    jobs = dag_jobs([("a", "b")], now=now)
    parent = running(jobs["a"], scheduled_for=t, now=now)
    finished = now + timedelta(seconds=1)
    succeed(parent, now=finished)
    child = the_run(jobs["b"], t)
    assert (child.state, child.trigger, child.due_at) == (PENDING, RunTrigger.UPSTREAM, finished)
    assert child.upstream_run_ids == [parent.id]
    assert child.partition == jobs["b"].partition
    assert JobRun.objects.filter(job=jobs["b"]).count() == 1


def test_outcome_rolled_back_leaves_no_child_run() -> None:
    now = _now()
    jobs = dag_jobs([("a", "b")], now=now)
    parent = running(jobs["a"], scheduled_for=now, now=now)
    seen: list[JobRun | None] = []

    def crash_before_commit() -> None:
        with transaction.atomic():
            succeed(parent, now=now)
            seen.append(run_for(jobs["b"], now))
            raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError, match="crash before commit"):
        crash_before_commit()
    assert seen[0] is not None
    assert run_for(jobs["b"], now) is None
    assert JobRun.objects.get(id=parent.id).state == RunState.RUNNING


def test_failure_propagates_through_three_levels_naming_the_failed_run() -> None:
    now = _now()
    jobs = dag_jobs([("a", "b"), ("b", "c"), ("c", "d")], now=now)
    parent = running(jobs["a"], scheduled_for=now, now=now)
    _dead(parent, now=now)
    assert states_for(jobs, now) == {
        "a": "dead", "b": UPSTREAM_FAILED, "c": UPSTREAM_FAILED, "d": UPSTREAM_FAILED,
    }  # fmt: skip
    b, c, d = (the_run(jobs[n], now) for n in "bcd")
    for run in (b, c, d):
        assert f"run {parent.id} of job" in run.last_error
        assert run.last_error.endswith("ended dead")
        assert run.finished_at == now
    # Each names its own parent's run for T, the deeper ones created in the same statement.
    assert (b.upstream_run_ids, c.upstream_run_ids, d.upstream_run_ids) == (
        [parent.id], [b.id], [c.id],
    )  # fmt: skip


def test_all_done_child_runs_after_failed_and_upstream_failed_parents() -> None:
    now = _now()
    # a fails; b (all_success) is upstream_failed; c (all_done after a) runs; d (all_done after
    # b and e) runs once e is done too.
    jobs = dag_jobs([("a", "b"), ("a", "c"), ("b", "d"), ("e", "d")], now=now, all_done="cd")
    e = running(jobs["e"], scheduled_for=now, now=now)
    assert runs.run_fail(run_id=running(jobs["a"], scheduled_for=now, now=now).id, attempt=1,
                         error="404", now=now)  # fmt: skip
    assert states_for(jobs, now) == {
        "a": "failed", "b": UPSTREAM_FAILED, "c": PENDING, "d": None, "e": "running",
    }  # fmt: skip
    assert runs.run_fail(run_id=e.id, attempt=1, error="404", now=now)
    d = the_run(jobs["d"], now)
    assert d.state == PENDING
    b = the_run(jobs["b"], now)
    assert sorted(d.upstream_run_ids) == sorted([b.id, e.id])


def test_diamond_fan_in_waits_for_both_parents() -> None:
    now = _now()
    jobs = dag_jobs([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], now=now)
    succeed(running(jobs["a"], scheduled_for=now, now=now), now=now)
    b, c = the_run(jobs["b"], now), the_run(jobs["c"], now)
    succeed(start(b, now=now), now=now)
    assert run_for(jobs["d"], now) is None
    succeed(start(c, now=now), now=now)
    d = the_run(jobs["d"], now)
    assert d.state == PENDING
    assert sorted(d.upstream_run_ids) == sorted([b.id, c.id])


def test_replay_rearms_upstream_failed_children_one_level_per_success() -> None:
    now = _now()
    jobs = dag_jobs([("a", "b"), ("b", "c")], now=now)
    parent = running(jobs["a"], scheduled_for=now, now=now)
    _dead(parent, now=now)
    assert dead_letter_replay(run_id=parent.id, now=now)
    # Replayed but not yet succeeded: the children still wait as upstream_failed.
    assert states_for(jobs, now) == {"a": PENDING, "b": UPSTREAM_FAILED, "c": UPSTREAM_FAILED}
    later = now + timedelta(seconds=5)
    succeed(start(JobRun.objects.get(id=parent.id), now=later), now=later)
    assert states_for(jobs, now) == {"a": "succeeded", "b": PENDING, "c": UPSTREAM_FAILED}
    b = the_run(jobs["b"], now)
    assert (b.due_at, b.last_error, b.finished_at) == (later, "", None)
    succeed(start(b, now=later), now=later)
    assert states_for(jobs, now) == {"a": "succeeded", "b": "succeeded", "c": PENDING}


def test_cancel_skip_and_missed_parents_fail_their_all_success_children() -> None:
    now = _now()
    jobs = dag_jobs([("a", "b")], now=now)
    t1, t2, t3 = (now - timedelta(minutes=m) for m in (3, 2, 1))
    waiting = run_factory(jobs["a"], scheduled_for=t1, due_at=now)
    assert runs.run_request_cancel(run_id=waiting.id, now=now)
    # Recorded as missed by the engine's claim and skipped by the policy: inserted or moved.
    run_factory(jobs["a"], scheduled_for=t2, state=RunState.MISSED, due_at=None, finished_at=now)
    queued = run_factory(jobs["a"], scheduled_for=t3, state=RunState.QUEUED, attempt=1,
                         queued_at=now, due_at=None)  # fmt: skip
    JobRun.objects.filter(id=queued.id).update(state=RunState.SKIPPED, finished_at=now)
    for t, cause in ((t1, "cancelled"), (t2, "missed"), (t3, "skipped")):
        child = the_run(jobs["b"], t)
        assert child.state == UPSTREAM_FAILED, cause
        assert f"ended {cause}" in child.last_error


def test_fan_out_hands_off_every_child_in_one_outcome() -> None:
    now = _now()
    jobs = dag_jobs([("a", f"c{i:03}") for i in range(100)], now=now)
    succeed(running(jobs["a"], scheduled_for=now, now=now), now=now)
    states = states_for(jobs, now)
    assert [s for name, s in states.items() if name != "a"] == [PENDING] * 100


def test_parents_finishing_together_create_exactly_one_child_run() -> None:
    """Two transactions interleaved on purpose: the first records its parent's success and holds
    its transaction open while the second records the other parent's; whichever order they
    commit in, the child gets one run, written by the one that sees both successes."""
    now = _now()
    jobs = dag_jobs([("a", "c"), ("b", "c")], now=now)
    a = running(jobs["a"], scheduled_for=now, now=now)
    b = running(jobs["b"], scheduled_for=now, now=now)
    with psycopg.connect(test_database_url(), autocommit=False) as first:
        first.execute(
            "UPDATE jobs_jobrun SET state = 'succeeded', finished_at = %s, lease_until = NULL"
            " WHERE id = %s",
            [now, a.id],
        )
        second_done = threading.Event()

        def second() -> None:
            with psycopg.connect(test_database_url(), autocommit=True) as conn:
                conn.execute(
                    "UPDATE jobs_jobrun SET state = 'succeeded', finished_at = %s,"
                    " lease_until = NULL WHERE id = %s",
                    [now, b.id],
                )
            second_done.set()

        thread = threading.Thread(target=second)
        thread.start()
        # The second waits for the first's lock on (c, T), not past it.
        wait_until(_waiting_on_advisory_lock, timeout_s=10, what="the second hand-off to wait")
        assert not second_done.is_set()
        first.commit()
        thread.join(timeout=10)
    assert second_done.is_set()
    child = the_run(jobs["c"], now)
    assert child.state == PENDING
    assert sorted(child.upstream_run_ids) == sorted([a.id, b.id])
    assert JobRun.objects.filter(job=jobs["c"]).count() == 1


def _waiting_on_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        row = cursor.fetchone()
    return bool(row and row[0])


def test_parents_outcome_wakes_the_child_partitions_owner_to_queue_it_at_once(
    redis_client: redis.Redis,
) -> None:
    now = _now()
    clock = FakeClock(now)
    # Timers poll once an hour here: only the wake-up can queue the child within this test.
    engine = make_engine(clock, timer_poll_s=3600.0)
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    try:
        engine.tick()  # takes the leases, subscribes, fires the (empty) timers
        jobs = dag_jobs([("a", "b")], now=now)
        succeed(running(jobs["a"], scheduled_for=now, now=now), now=now)
        assert the_run(jobs["b"], now).state == PENDING
        wait_until(
            lambda: (engine.tick(), the_run(jobs["b"], now).state)[1] == RunState.QUEUED,
            timeout_s=10,
            what="the woken engine to queue the child",
        )
        assert clock.now() == now
        assert the_run(jobs["b"], now).attempt == 1
    finally:
        engine.shutdown()


def test_check_reports_a_missing_trigger_until_it_is_installed() -> None:
    from django.core.checks import run_checks

    def errors() -> list[str]:
        return [m.id for m in run_checks(databases=["default"]) if m.id == "jobs.E007"]

    assert errors() == []
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER jobs_run_handoff_update ON jobs_jobrun")
    try:
        assert errors() == ["jobs.E007"]
    finally:
        dag_handoff.install()
    assert errors() == []


def test_a_triggered_root_and_a_replayed_run_are_queued_by_the_woken_owner_at_once(
    redis_client: redis.Redis,
) -> None:
    now = _now()
    engine = make_engine(FakeClock(now), timer_poll_s=3600.0)
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    try:
        engine.tick()
        # No children here: no outcome's wake-up can queue these two.
        job = job_factory(now=now, cron=YEARLY)
        root = job_trigger_now(job_id=job.id, now=now)
        dead = dead_run_factory(job, scheduled_for=now - timedelta(hours=1), finished_at=now)
        assert dead_letter_replay(run_id=dead.id, now=now)

        def queued() -> bool:
            engine.tick()
            states = JobRun.objects.filter(id__in=[root.id, dead.id]).values_list(
                "state", flat=True
            )
            return set(states) == {RunState.QUEUED}

        wait_until(queued, timeout_s=10, what="the woken engine to queue both runs")
    finally:
        engine.shutdown()
