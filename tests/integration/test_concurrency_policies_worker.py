"""Concurrency policies end to end: real worker processes start, fail, retry and are held back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun
from jobs.services.jobs import job_cancel
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.factories import job_factory, run_factory
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    queue_attempt,
    wait_for_state,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _now() -> datetime:
    return SystemClock().now()


def _job(**fields: Any) -> Job:
    return job_factory(now=_now(), **fields)


def _publish(job: Job, offset_s: int) -> JobRun:
    now = _now()
    run = run_factory(
        job, scheduled_for=now + timedelta(seconds=offset_s), state=RunState.QUEUED, attempt=1,
        queued_at=now, due_at=None,
    )  # fmt: skip
    publish_run(run.id, 1)
    return run


def test_forbid_skips_a_firing_behind_a_retry_and_leaves_the_retry_as_it_was(
    worker: CeleryWorker,
) -> None:
    job = _job(
        target_name="tests.flaky",
        payload={"succeed_on": 2},
        concurrency_policy="forbid",
        max_attempts=3,
        retry_base_delay=timedelta(minutes=10),
        retry_jitter=False,
    )
    earlier = _publish(job, 0)
    waiting = wait_for_state(earlier, RunState.RETRY_WAIT, worker=worker)
    assert waiting.last_error.startswith("RuntimeError: flaky failure on attempt 1")

    newer = _publish(job, 60)
    skipped = wait_for_state(newer, RunState.SKIPPED, worker=worker)

    assert skipped.last_error == (
        f"skipped: run {earlier.id} (firing {earlier.scheduled_for.isoformat()}) of this job is"
        " still retry_wait (forbid)"
    )
    assert skipped.attempts.count() == 0
    after = JobRun.objects.get(id=earlier.id)
    assert (after.state, after.attempt, after.due_at, after.last_error) == (
        RunState.RETRY_WAIT, 1, waiting.due_at, waiting.last_error,
    )  # fmt: skip
    # Its retry, when queued, runs and succeeds: the skipped firing took nothing from it.
    queue_attempt(after, attempt=2, now=_now())
    done = wait_for_state(after, RunState.SUCCEEDED, worker=worker)
    assert list(done.attempts.order_by("attempt").values_list("outcome", flat=True)) == [
        AttemptOutcome.FAILED,
        AttemptOutcome.SUCCEEDED,
    ]


def test_replace_older_firing_started_after_a_newer_one_never_cancels_it(
    worker: CeleryWorker,
) -> None:
    job = _job(target_name="tests.block", payload={"max_s": 60}, concurrency_policy="replace")
    newer = _publish(job, 60)
    wait_for_state(newer, RunState.RUNNING, worker=worker)

    older = _publish(job, 0)
    skipped = wait_for_state(older, RunState.SKIPPED, worker=worker)

    assert "superseded by the newer run" in skipped.last_error
    assert str(newer.id) in skipped.last_error
    still = JobRun.objects.get(id=newer.id)
    assert (still.state, still.cancel_requested) == (RunState.RUNNING, False)
    job_cancel(job_id=job.id, now=_now())
    wait_for_state(newer, RunState.CANCELLED, worker=worker)
