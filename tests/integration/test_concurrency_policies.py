"""Concurrency policies at the start statement, on real PostgreSQL: every policy against every
state of the job's other run, in both orders of firing and start."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db import connections as db_connections

from jobs.models import Job, JobRun, RunAttempt
from jobs.services.runs import run_lease, run_retry
from jobs.services.starts import StartOutcome, StartResult, run_start
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = T0 + timedelta(days=1)
EARLY, LATE = T0, T0 + timedelta(minutes=1)


def _queued(job: Job, at: Any, attempt: int = 1, **fields: Any) -> JobRun:
    return run_factory(
        job, scheduled_for=at, state=RunState.QUEUED, attempt=attempt, queued_at=NOW,
        due_at=None, **fields,
    )  # fmt: skip


def _start(run: JobRun, attempt: int = 1) -> StartResult:
    return run_start(run_id=run.id, attempt=attempt, worker="w", now=NOW)


def _failed_once(job: Job, at: Any, error: str = "boom: attempt 1") -> JobRun:
    """A run whose first attempt failed: in retry_wait, as the worker's outcome leaves it."""
    run = _queued(job, at)
    assert _start(run).outcome == StartOutcome.STARTED
    due = NOW + timedelta(minutes=5)
    assert run_retry(run_id=run.id, attempt=1, due_at=due, error=error, now=NOW)
    return JobRun.objects.get(id=run.id)


def _other_run(job: Job, state: RunState, at: Any) -> JobRun:
    """Another run of ``job`` in ``state``, put there through the start and outcome services."""
    if state == RunState.RETRY_WAIT:
        return _failed_once(job, at)
    run = _queued(job, at)
    if state == RunState.RUNNING:
        assert _start(run).outcome == StartOutcome.STARTED
    return JobRun.objects.get(id=run.id)


def _reload(run: JobRun) -> JobRun:
    return JobRun.objects.get(id=run.id)


# --- forbid -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT])
def test_forbid_skips_a_new_firing_while_an_earlier_run_is_in_flight(state: RunState) -> None:
    job = job_factory(concurrency_policy="forbid")
    earlier = _other_run(job, state, EARLY)
    before = _reload(earlier)
    newer = _queued(job, LATE)

    result = _start(newer)

    assert (result.outcome, result.policy) == (StartOutcome.SKIPPED, "forbid")
    skipped = _reload(newer)
    assert skipped.state == RunState.SKIPPED
    assert skipped.finished_at == NOW
    assert skipped.last_error == (
        f"skipped: run {earlier.id} (firing {EARLY.isoformat()}) of this job is still "
        f"{state.value} (forbid)"
    )
    assert not RunAttempt.objects.filter(run_id=newer.id).exists()
    # The earlier run is exactly as it was: a retry keeps its state, due time and error.
    after = _reload(earlier)
    assert (after.state, after.attempt, after.due_at, after.last_error) == (
        before.state, before.attempt, before.due_at, before.last_error,
    )  # fmt: skip


def test_forbid_retry_of_the_earlier_run_starts_once_the_newer_firing_was_skipped() -> None:
    job = job_factory(concurrency_policy="forbid")
    earlier = _failed_once(job, EARLY)
    newer = _queued(job, LATE)
    assert _start(newer).outcome == StartOutcome.SKIPPED
    JobRun.objects.filter(id=earlier.id).update(state=RunState.QUEUED, attempt=2, due_at=None)

    assert _start(earlier, attempt=2).outcome == StartOutcome.STARTED


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RETRY_WAIT])
def test_forbid_starts_the_earliest_firing_before_later_waiting_ones(state: RunState) -> None:
    job = job_factory(concurrency_policy="forbid")
    later = _other_run(job, state, LATE)
    earlier = _queued(job, EARLY)

    assert _start(earlier).outcome == StartOutcome.STARTED
    if state == RunState.QUEUED:
        # The later firing, started after, finds the earlier running and is skipped.
        assert _start(later).outcome == StartOutcome.SKIPPED


def test_forbid_skips_an_earlier_firing_that_starts_while_a_later_one_runs() -> None:
    job = job_factory(concurrency_policy="forbid")
    later = _other_run(job, RunState.RUNNING, LATE)
    catch_up = _queued(job, EARLY)

    assert _start(catch_up).outcome == StartOutcome.SKIPPED
    assert f"run {later.id}" in _reload(catch_up).last_error
    assert _reload(later).state == RunState.RUNNING


def test_forbid_defers_a_retry_held_back_by_another_run_and_keeps_its_error() -> None:
    # The job allowed overlap when its newer run started, and forbids it now.
    job = job_factory(concurrency_policy="allow")
    earlier = _failed_once(job, EARLY, error="boom: attempt 1")
    newer = _other_run(job, RunState.RUNNING, LATE)
    Job.objects.filter(id=job.id).update(concurrency_policy="forbid")
    JobRun.objects.filter(id=earlier.id).update(state=RunState.QUEUED, attempt=2, due_at=None)

    result = _start(earlier, attempt=2)

    assert (result.outcome, result.policy) == (StartOutcome.DEFERRED, "forbid")
    deferred = _reload(earlier)
    assert (deferred.state, deferred.last_error) == (RunState.RETRY_WAIT, "boom: attempt 1")
    # The attempt it was queued as never started: the timer queues it as attempt 2 again.
    assert (deferred.attempt, deferred.due_at) == (1, NOW + run_lease())
    assert not RunAttempt.objects.filter(run_id=earlier.id, attempt=2).exists()
    assert _reload(newer).state == RunState.RUNNING
    # Once the newer run has finished, the re-queued retry starts as attempt 2.
    JobRun.objects.filter(id=newer.id).update(
        state=RunState.SUCCEEDED, finished_at=NOW, lease_until=None
    )
    JobRun.objects.filter(id=earlier.id).update(state=RunState.QUEUED, attempt=2, due_at=None)
    assert _start(earlier, attempt=2).outcome == StartOutcome.STARTED


def test_forbid_stale_delivery_holds_nothing_back() -> None:
    job = job_factory(concurrency_policy="forbid")
    _other_run(job, RunState.RUNNING, EARLY)
    newer = _queued(job, LATE, attempt=2, last_error="lost")

    assert _start(newer, attempt=1).outcome == StartOutcome.STALE
    assert (_reload(newer).state, _reload(newer).last_error) == (RunState.QUEUED, "lost")


# --- replace ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT])
def test_replace_newer_firing_replaces_an_older_run_in_flight(state: RunState) -> None:
    job = job_factory(concurrency_policy="replace")
    older = _other_run(job, state, EARLY)
    error = _reload(older).last_error
    newer = _queued(job, LATE)

    assert _start(newer).outcome == StartOutcome.STARTED

    replaced = _reload(older)
    assert replaced.cancel_requested is True
    if state == RunState.RUNNING:
        # Its supervisor ends it cancelled at the next heartbeat.
        assert replaced.state == RunState.RUNNING
    else:
        reason = f"replaced by the newer run {newer.id} (replace)"
        assert (replaced.state, replaced.due_at, replaced.finished_at) == (
            RunState.CANCELLED, None, NOW,
        )  # fmt: skip
        assert replaced.last_error == (f"{reason}; previous error: {error}" if error else reason)


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT])
@pytest.mark.parametrize("attempt", [1, 2])
def test_replace_older_run_starting_after_a_newer_one_never_cancels_it(
    state: RunState, attempt: int
) -> None:
    job = job_factory(concurrency_policy="replace")
    newer = _other_run(job, state, LATE)
    before = _reload(newer)
    older = _queued(job, EARLY, attempt=attempt, last_error="boom" if attempt > 1 else "")

    result = _start(older, attempt=attempt)

    assert (result.outcome, result.policy) == (StartOutcome.SKIPPED, "replace")
    skipped = _reload(older)
    reason = (
        f"skipped: superseded by the newer run {newer.id} (firing {LATE.isoformat()}), which is"
        f" {state.value} (replace)"
    )
    assert skipped.state == RunState.SKIPPED
    assert skipped.last_error == (f"{reason}; previous error: boom" if attempt > 1 else reason)
    after = _reload(newer)
    assert (after.state, after.cancel_requested, after.last_error) == (
        before.state, False, before.last_error,
    )  # fmt: skip


def test_replace_stale_delivery_replaces_nothing() -> None:
    job = job_factory(concurrency_policy="replace")
    older = _other_run(job, RunState.RUNNING, EARLY)
    newer = _queued(job, LATE)
    JobRun.objects.filter(id=newer.id).update(state=RunState.CANCELLED, finished_at=NOW)

    assert _start(newer).outcome == StartOutcome.STALE
    assert _reload(older).cancel_requested is False


# --- allow --------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT])
def test_allow_starts_regardless_of_other_runs(state: RunState) -> None:
    job = job_factory(concurrency_policy="allow")
    other = _other_run(job, state, EARLY)
    newer = _queued(job, LATE)

    assert _start(newer).outcome == StartOutcome.STARTED
    assert _reload(other).state == state
    assert _reload(other).cancel_requested is False


# --- many starts at once ------------------------------------------------------------------


def _start_all_at_once(runs: list[JobRun]) -> dict[Any, StartOutcome]:
    barrier = threading.Barrier(len(runs))
    outcomes: dict[Any, StartOutcome] = {}

    def start(run: JobRun) -> None:
        try:
            barrier.wait()
            outcomes[run.scheduled_for] = _start(run).outcome
        finally:
            db_connections.close_all()

    threads = [threading.Thread(target=start, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("policy", ["forbid", "replace"])
def test_runs_of_one_job_starting_at_once_leave_exactly_one_running(policy: str) -> None:
    job = job_factory(concurrency_policy=policy)
    runs = [_queued(job, T0 + timedelta(minutes=i)) for i in range(8)]
    connection.close()

    outcomes = _start_all_at_once(runs)

    running = JobRun.objects.filter(job=job, state=RunState.RUNNING)
    # forbid: the earliest firing wins; replace: the newest.
    winner = runs[0] if policy == "forbid" else runs[-1]
    assert list(running.values_list("id", flat=True)) == [winner.id]
    assert outcomes[winner.scheduled_for] == StartOutcome.STARTED
    losers = JobRun.objects.filter(job=job).exclude(id=winner.id)
    assert set(losers.values_list("state", flat=True)) <= {RunState.SKIPPED, RunState.CANCELLED}


@pytest.mark.parametrize("policy", ["forbid", "replace"])
def test_a_cancelled_run_ends_cancelled_and_neither_holds_back_nor_replaces(policy: str) -> None:
    job = job_factory(concurrency_policy=policy)
    running = _other_run(job, RunState.RUNNING, EARLY if policy == "replace" else LATE)
    cancelled = _queued(job, LATE if policy == "replace" else EARLY, cancel_requested=True)

    assert _start(cancelled).outcome == StartOutcome.STALE

    assert _reload(cancelled).state == RunState.CANCELLED
    assert (_reload(running).state, _reload(running).cancel_requested) == (RunState.RUNNING, False)
