"""Concurrency policies and cancellation of running callables, on a real worker."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun
from jobs.services.jobs import job_cancel
from jobs.services.runs import run_request_cancel
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.factories import job_factory, run_factory
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    wait_for_state,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _now() -> datetime:
    return SystemClock().now()


def _job(**overrides: Any) -> Job:
    fields: dict[str, Any] = {"target_name": "tests.echo", "now": _now()}
    fields.update(overrides)
    return job_factory(**fields)


def _queued_run(job: Job, offset_s: int = 0) -> JobRun:
    now = _now()
    return run_factory(
        job,
        scheduled_for=now + timedelta(seconds=offset_s),
        state=RunState.QUEUED,
        attempt=1,
        queued_at=now,
        due_at=None,
    )


def _start_blocking_run(job: Job, worker: CeleryWorker) -> JobRun:
    first = _queued_run(job)
    publish_run(first.id, 1)
    return wait_for_state(first, RunState.RUNNING, worker=worker)


def test_forbid_skips_a_firing_while_the_previous_run_is_running(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.block", payload={"max_s": 60}, concurrency_policy="forbid")
    first = _start_blocking_run(job, worker)
    second = _queued_run(job, offset_s=60)
    publish_run(second.id, 1)

    skipped = wait_for_state(second, RunState.SKIPPED, worker=worker)

    assert "forbid" in skipped.last_error
    assert skipped.attempts.count() == 0
    assert JobRun.objects.get(id=first.id).state == RunState.RUNNING
    assert run_request_cancel(run_id=first.id, now=_now())
    wait_for_state(first, RunState.CANCELLED, worker=worker)


def test_replace_cancels_the_running_run_and_starts_the_new(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.block", payload={"max_s": 60}, concurrency_policy="replace")
    first = _start_blocking_run(job, worker)
    second = _queued_run(job, offset_s=60)
    publish_run(second.id, 1)

    cancelled = wait_for_state(first, RunState.CANCELLED, worker=worker)
    assert wait_for_state(second, RunState.RUNNING, RunState.CANCELLED, worker=worker)

    assert cancelled.attempts.get().outcome == AttemptOutcome.CANCELLED
    assert JobRun.objects.get(id=second.id).state == RunState.RUNNING
    job_cancel(job_id=job.id, now=_now())
    wait_for_state(second, RunState.CANCELLED, worker=worker)


def test_allow_overlaps_runs_of_the_same_job(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.block", payload={"max_s": 60}, concurrency_policy="allow")
    first = _start_blocking_run(job, worker)
    second = _queued_run(job, offset_s=60)
    publish_run(second.id, 1)

    wait_for_state(second, RunState.RUNNING, worker=worker)

    assert JobRun.objects.get(id=first.id).cancel_requested is False
    job_cancel(job_id=job.id, now=_now())
    wait_for_state(first, RunState.CANCELLED, worker=worker)
    wait_for_state(second, RunState.CANCELLED, worker=worker)


def test_cancel_stops_a_cooperative_callable_and_is_not_retried(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.block", payload={"max_s": 60}, max_attempts=3)
    run = _start_blocking_run(job, worker)

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, worker=worker)
    assert done.due_at is None
    assert done.finished_at is not None
    assert done.attempts.get().outcome == AttemptOutcome.CANCELLED


def test_cancel_abandons_a_callable_that_ignores_it_after_the_grace(worker: CeleryWorker) -> None:
    job = _job(target_name="tests.stubborn", payload={"sleep_s": 20})
    run = _start_blocking_run(job, worker)
    abandoned = worker.metric("scheduler_abandoned_targets_total")

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, worker=worker)
    assert done.attempts.get().outcome == AttemptOutcome.CANCELLED
    assert worker.metric("scheduler_abandoned_targets_total") == abandoned + 1
