"""Each attempt's result or traceback in django-celery-results, written by a real worker."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import states
from celery.result import AsyncResult
from django_celery_results.models import TaskResult

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun
from jobs.services.run_results import (
    AttemptResult,
    result_record,
    result_task_id,
    results_of_run,
    runs_delete,
)
from jobs.states import RunState
from scheduler_project.celery import app
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.api import api_client_for
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    HttpTarget,
    allowed_http_target_fixture,  # noqa: F401  (fixture)
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    queue_attempt,
    wait_for_state,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _now() -> datetime:
    return SystemClock().now()


def _queued(job: Job) -> JobRun:
    now = _now()
    return run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )


def _stored(run: JobRun, attempt: int) -> TaskResult:
    # Written by the worker's background writer, within its flush interval of the outcome.
    rows = TaskResult.objects.filter(task_id=result_task_id(run.id, attempt))
    wait_until(rows.exists, what=f"the stored result of attempt {attempt} of {run.id}")
    return rows.get()


def test_task_target_result_is_the_celery_task_result(worker: CeleryWorker) -> None:
    job = job_factory(target_kind="task", target_name="tests.task_target", payload={"n": 7})
    run = _queued(job)
    publish_run(run.id, 1)
    done = wait_for_state(run, RunState.SUCCEEDED, worker=worker)

    row = _stored(run, 1)
    assert row.status == states.SUCCESS
    assert row.task_name == "tests.task_target"
    assert row.worker == done.worker
    assert row.date_started is not None
    assert row.date_started <= row.date_done
    assert row.traceback is None
    # Celery reads it back like any task's result, under the attempt's deterministic id.
    value = AsyncResult(result_task_id(run.id, 1), app=app).result
    assert value["payload"] == {"n": 7}
    assert value["scheduler_context"]["run_id"] == str(run.id)
    assert value == done.result


def test_failed_attempt_keeps_its_traceback_and_the_retry_its_result(
    worker: CeleryWorker,
) -> None:
    api = api_client_for("results")
    job = job_factory(
        api.tenant,
        target_name="tests.flaky",
        retry_base_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=2),
    )
    run = _queued(job)
    publish_run(run.id, 1)
    wait_for_state(run, RunState.RETRY_WAIT, worker=worker)
    queue_attempt(run, attempt=2, now=_now())
    done = wait_for_state(run, RunState.SUCCEEDED, worker=worker)

    first = _stored(run, 1)
    assert first.status == states.FAILURE
    assert first.traceback is not None
    assert "Traceback (most recent call last)" in first.traceback
    assert 'raise RuntimeError(f"flaky failure on attempt {context.attempt}")' in first.traceback
    error = AsyncResult(result_task_id(run.id, 1), app=app).result
    assert isinstance(error, Exception)
    assert type(error).__name__ == "RuntimeError"
    assert "flaky failure on attempt 1" in str(error)
    assert _stored(run, 2).status == states.SUCCESS
    assert sorted(results_of_run(done)) == [1, 2]
    # The API shows each attempt's stored result under its task id.
    body = api.get(f"/v1/runs/{run.id}").json()
    failed, succeeded = (attempt["result"] for attempt in body["attempts"])
    assert failed["task_id"] == f"{run.id}:1"
    assert failed["status"] == "FAILURE"
    assert "flaky failure on attempt 1" in failed["traceback"]
    assert failed["value"]["exc_type"] == "RuntimeError"
    assert succeeded == {
        "task_id": f"{run.id}:2",
        "status": "SUCCESS",
        "value": {"succeeded_on": 2},
        "traceback": None,
        "done_at": succeeded["done_at"],
    }


@pytest.mark.usefixtures("allowed_http_target")
def test_http_failure_stores_the_response_summary(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    job = job_factory(
        target_kind="http", target_name="", target_url=http_target.url("/missing"), now=_now()
    )
    run = _queued(job)
    publish_run(run.id, 1)
    wait_for_state(run, RunState.FAILED, worker=worker)

    row = _stored(run, 1)
    assert row.status == states.FAILURE
    assert row.task_name == http_target.url("/missing")
    assert "HTTP 404" in str(AsyncResult(result_task_id(run.id, 1), app=app).result)
    stored_meta: dict[str, Any] = json.loads(row.meta)
    assert stored_meta["response"]["status"] == 404
    assert stored_meta["accepted"] is True


def _attempted(job: Job, at: datetime, attempts: int) -> JobRun:
    run = run_factory(
        job, scheduled_for=at, state=RunState.SUCCEEDED, attempt=attempts, finished_at=at
    )
    for number in range(1, attempts + 1):
        run.attempts.create(attempt=number, started_at=at, finished_at=at, outcome="succeeded")
        result_record(
            AttemptResult(
                run_id=run.id,
                attempt=number,
                job_id=job.id,
                target="tests.echo",
                status=states.SUCCESS,
                result={"n": number},
                error="",
                traceback="",
                worker="w",
                started_at=at,
                finished_at=at,
            )
        )
    return run


def test_results_go_with_their_runs_and_jobs() -> None:
    now = _now()
    job, other = job_factory(now=now), job_factory(now=now)
    old = _attempted(job, now - timedelta(days=30), 2)
    kept = _attempted(job, now - timedelta(days=1), 1)
    elsewhere = _attempted(other, now - timedelta(days=30), 1)
    ours = [result_task_id(old.id, 1), result_task_id(old.id, 2), result_task_id(kept.id, 1)]
    theirs = result_task_id(elsewhere.id, 1)

    def stored() -> set[str]:
        # Only these runs' rows: another module's in-process executor may have written others.
        rows = TaskResult.objects.filter(task_id__in=[*ours, theirs])
        return set(rows.values_list("task_id", flat=True))

    assert stored() == {*ours, theirs}
    assert runs_delete([old.id]) == 1 + 2  # the run and its two attempts
    assert not JobRun.objects.filter(id=old.id).exists()
    assert stored() == {result_task_id(kept.id, 1), theirs}

    job.delete()
    assert stored() == {theirs}


def test_admin_run_page_shows_each_attempts_stored_result() -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    now = _now()
    run = _attempted(job_factory(now=now), now - timedelta(hours=1), 2)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-unused-1"))
    html = client.get(f"/admin/jobs/jobrun/{run.pk}/change/").content.decode()
    assert f"task id {run.id}:1" in html
    assert f"task id {run.id}:2" in html
    assert "{&quot;n&quot;: 2}" in html
