"""DAG runs end to end: a beat engine (in this process) queues, a real worker runs, PostgreSQL
hands off. Chain, fan-out and diamond fan-in, all_done, failure propagation, replay re-arming,
backfill and trigger of a root, and two parents finishing together on two worker processes."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.engine import BeatEngine
from beat_engine.notifications import ChangeFeed
from jobs.errors import InvalidTransition
from jobs.models import Job, JobRun, RunTrigger
from jobs.services.dead_letters import dead_letter_replay
from jobs.services.jobs import job_trigger_now
from jobs.states import RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.api import api_client_for
from tests.support.beat_nodes import make_engine
from tests.support.dags import dag_jobs, states_for, the_run
from tests.support.factories import run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SUCCEEDED, UPSTREAM_FAILED = RunState.SUCCEEDED.value, RunState.UPSTREAM_FAILED.value


def _now() -> datetime:
    return SystemClock().now()


@pytest.fixture
def engine(worker: CeleryWorker) -> Iterator[BeatEngine]:
    """One beat node for the test, with its change feed, ticking on a thread of its own."""
    node = make_engine(SystemClock())
    node.feed = ChangeFeed(redis.Redis.from_url(node.config.redis_url))
    stop = threading.Event()

    def run() -> None:
        try:
            node.run(stop)
        finally:
            connection.close()  # this thread's session, or the test database cannot be dropped

    thread = threading.Thread(target=run, name="engine", daemon=True)
    thread.start()
    yield node
    stop.set()
    thread.join(timeout=30)


def _settled(
    jobs: dict[str, Job], t: datetime, expected: dict[str, str], worker: CeleryWorker
) -> None:
    try:
        wait_until(lambda: states_for(jobs, t) == expected, timeout_s=30, what=f"{expected}")
    except AssertionError:
        raise AssertionError(f"{states_for(jobs, t)}\n{worker.log_tail()}") from None


def _dag(edges: list[tuple[str, str]], **fields: Any) -> dict[str, Job]:
    return dag_jobs(edges, now=_now(), target_name="tests.echo", max_attempts=1, **fields)


def test_chain_triggered_at_its_root_runs_in_order_for_one_logical_time(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    jobs = _dag([("a", "b"), ("b", "c")])
    root = job_trigger_now(job_id=jobs["a"].id, now=_now())
    t = root.scheduled_for
    _settled(jobs, t, {"a": SUCCEEDED, "b": SUCCEEDED, "c": SUCCEEDED}, worker)
    a, b, c = (the_run(jobs[n], t) for n in "abc")
    assert (b.trigger, c.trigger) == (RunTrigger.UPSTREAM, RunTrigger.UPSTREAM)
    assert (b.upstream_run_ids, c.upstream_run_ids) == ([a.id], [b.id])
    assert a.finished_at is not None
    assert b.started_at is not None
    assert b.started_at >= a.finished_at
    assert b.finished_at is not None
    assert c.started_at is not None
    assert c.started_at >= b.finished_at
    assert JobRun.objects.filter(job__in=jobs.values()).count() == 3


def test_fan_out_and_diamond_fan_in_run_each_job_once(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    jobs = _dag([("a", "b"), ("a", "c"), ("a", "e"), ("b", "d"), ("c", "d")])
    t = job_trigger_now(job_id=jobs["a"].id, now=_now()).scheduled_for
    _settled(jobs, t, dict.fromkeys("abcde", SUCCEEDED), worker)
    d = the_run(jobs["d"], t)
    assert sorted(d.upstream_run_ids) == sorted(the_run(jobs[n], t).id for n in "bc")
    assert d.started_at is not None
    assert all(d.started_at >= (the_run(jobs[n], t).finished_at or d.started_at) for n in "bc")
    assert JobRun.objects.filter(job__in=jobs.values()).count() == 5


def test_failure_propagates_three_levels_and_all_done_children_still_run(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    # a fails on its only attempt; b -> c -> d (all_success) never run; e (all_done after a)
    # and f (all_done after d) run.
    jobs = _dag([("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("d", "f")], all_done="ef")
    Job.objects.filter(id=jobs["a"].id).update(target_name="tests.always_fails")
    t = job_trigger_now(job_id=jobs["a"].id, now=_now()).scheduled_for
    _settled(
        jobs, t,
        {"a": "dead", "b": UPSTREAM_FAILED, "c": UPSTREAM_FAILED, "d": UPSTREAM_FAILED,
         "e": SUCCEEDED, "f": SUCCEEDED},
        worker,
    )  # fmt: skip
    a = the_run(jobs["a"], t)
    for name in "bcd":
        run = the_run(jobs[name], t)
        assert f"run {a.id} of job" in run.last_error
        assert run.attempt == 0, "an upstream_failed run never started an attempt"


def test_replaying_the_dead_parent_rearms_its_children_down_the_chain(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    jobs = _dag([("a", "b"), ("b", "c")])
    # Fails its first attempt, succeeds on the second, which only a replay grants.
    Job.objects.filter(id=jobs["a"].id).update(target_name="tests.flaky", payload={"succeed_on": 2})
    t = job_trigger_now(job_id=jobs["a"].id, now=_now()).scheduled_for
    _settled(jobs, t, {"a": "dead", "b": UPSTREAM_FAILED, "c": UPSTREAM_FAILED}, worker)
    a = the_run(jobs["a"], t)
    assert dead_letter_replay(run_id=a.id, now=_now())
    _settled(jobs, t, dict.fromkeys("abc", SUCCEEDED), worker)
    assert the_run(jobs["a"], t).attempt == 2
    assert [the_run(jobs[n], t).attempt for n in "bc"] == [1, 1]
    assert JobRun.objects.filter(job__in=jobs.values()).count() == 3


def test_backfill_of_a_root_runs_its_dag_for_every_firing_of_the_range(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    now = _now()
    anchor = now.replace(microsecond=0) - timedelta(hours=1)
    jobs = _dag(
        [("a", "b"), ("b", "c")], roots={"interval": timedelta(minutes=1), "anchor_at": anchor}
    )
    start, end = anchor + timedelta(minutes=10), anchor + timedelta(minutes=12)
    out = io.StringIO()
    call_command(
        "backfill", str(jobs["a"].id), "--start", start.isoformat(), "--end", end.isoformat(),
        "--rate", "50/s", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    assert "created 3 of 3 firings" in out.getvalue()
    for minute in (10, 11, 12):
        _settled(jobs, anchor + timedelta(minutes=minute), dict.fromkeys("abc", SUCCEEDED), worker)
    assert JobRun.objects.filter(job=jobs["c"]).count() == 3
    with pytest.raises(CommandError, match="runs after its parents"):
        call_command(
            "backfill", str(jobs["b"].id), "--start", start.isoformat(), "--end", end.isoformat(),
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip


def test_a_dependent_job_cannot_be_triggered_on_its_own(worker: CeleryWorker) -> None:
    client = api_client_for("dag-trigger")
    jobs = dag_jobs([("a", "b")], now=_now(), tenant=client.tenant)
    with pytest.raises(InvalidTransition, match=f"{jobs['a'].name!r}"):
        job_trigger_now(job_id=jobs["b"].id, now=_now())
    response = client.post(f"/v1/jobs/{jobs['b'].id}/trigger")
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "invalid_transition"
    assert str(jobs["a"].id) in response.json()["error"]["message"]
    assert not JobRun.objects.filter(job=jobs["b"]).exists()
    # The root can be: that starts the DAG run for the instant.
    assert client.post(f"/v1/jobs/{jobs['a'].id}/trigger").status_code == 201


def test_two_parents_finishing_together_on_two_workers_make_one_child_run(
    worker: CeleryWorker, engine: BeatEngine
) -> None:
    # Two roots on one schedule, their runs for each T due together: the worker's two pool
    # processes run them side by side and record the outcomes at about the same instant.
    jobs = _dag([("a", "c"), ("b", "c")])
    Job.objects.filter(id__in=[jobs["a"].id, jobs["b"].id]).update(
        target_name="tests.nap", payload={"seconds": 0.2}
    )
    now = _now()
    instants = [now.replace(microsecond=0) - timedelta(minutes=m) for m in range(1, 7)]
    for t in instants:
        for name in "ab":
            run_factory(jobs[name], scheduled_for=t, due_at=now, trigger=RunTrigger.BACKFILL)
    for t in instants:
        _settled(jobs, t, dict.fromkeys("abc", SUCCEEDED), worker)
    assert JobRun.objects.filter(job=jobs["c"]).count() == len(instants)
