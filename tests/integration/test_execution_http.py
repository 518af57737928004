"""HTTP targets on a real worker: headers, status handling, redirects, cancel, SSRF at execution."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.conf import settings

from beat_engine.clock import SystemClock
from jobs.models import Job, JobRun
from jobs.services.runs import run_request_cancel
from jobs.states import AttemptOutcome, RunState
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    HttpTarget,
    allowed_http_target_fixture,  # noqa: F401  (fixture)
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    wait_for_state,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _now() -> datetime:
    return SystemClock().now()


pytestmark = [*pytestmark, pytest.mark.usefixtures("allowed_http_target")]


def _run_http(http_target: HttpTarget, path: str, **overrides: Any) -> tuple[Job, JobRun]:
    fields: dict[str, Any] = {
        "target_kind": "http",
        "target_name": "",
        "target_url": http_target.url(path),
        "target_headers": {"X-Team": "payments"},
        "payload": {"amount": 5},
        "now": _now(),
    }
    fields.update(overrides)
    job = job_factory(**fields)
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    return job, run


def test_http_post_carries_payload_and_scheduler_headers(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    job, run = _run_http(http_target, "/ok")
    publish_run(run.id, 1)

    done = wait_for_state(run, RunState.SUCCEEDED, worker=worker)

    (request,) = http_target.hits("/ok")
    headers = request["headers"]
    assert request["body"] == {"amount": 5}
    assert headers["Content-Type"] == "application/json"
    assert headers["Idempotency-Key"] == run.dedup_key
    assert headers["X-Scheduler-Attempt"] == "1"
    assert headers["X-Scheduler-Job-Id"] == str(job.id)
    assert headers["X-Scheduler-Run-Id"] == str(run.id)
    assert datetime.fromisoformat(headers["X-Scheduler-Scheduled-For"]) == run.scheduled_for
    assert headers["X-Team"] == "payments"
    assert headers["Host"] == f"127.0.0.1:{http_target.port}"
    # The 100 kB body is cut to HTTP_RESPONSE_MAX_BYTES.
    assert done.result is not None
    limit = settings.SCHEDULER["HTTP_RESPONSE_MAX_BYTES"]
    assert done.result["status"] == 200
    assert done.result["truncated"] is True
    assert len(done.result["body"]) == limit


@pytest.mark.parametrize(
    ("path", "state", "error"),
    [
        ("/unavailable", RunState.RETRY_WAIT, "HTTP 503"),
        ("/missing", RunState.FAILED, "HTTP 404"),
        ("/moved", RunState.FAILED, "HTTP 302"),
    ],
)
def test_http_status_decides_retry_or_permanent_failure(
    worker: CeleryWorker, http_target: HttpTarget, path: str, state: RunState, error: str
) -> None:
    _, run = _run_http(http_target, path)
    publish_run(run.id, 1)

    done = wait_for_state(run, state, worker=worker)

    assert done.last_error == error
    # Redirects are not followed: only the first URL was ever requested.
    assert [r["path"] for r in http_target.requests] == [path]


def test_client_error_is_retried_when_the_job_says_so(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    _, run = _run_http(http_target, "/missing", retry_on_client_error=True)
    publish_run(run.id, 1)

    assert wait_for_state(run, RunState.RETRY_WAIT, worker=worker).last_error == "HTTP 404"


def test_cancel_aborts_a_running_http_call(worker: CeleryWorker, http_target: HttpTarget) -> None:
    http_target.entered.clear()
    http_target.release.clear()
    _, run = _run_http(http_target, "/slow")
    publish_run(run.id, 1)
    wait_until(http_target.entered.is_set, what="the request to reach the server")

    assert run_request_cancel(run_id=run.id, now=_now())

    done = wait_for_state(run, RunState.CANCELLED, worker=worker)
    http_target.release.set()
    assert done.attempts.get().outcome == AttemptOutcome.CANCELLED


def test_address_is_rechecked_at_execution_and_refused(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    job, run = _run_http(http_target, "/ok")
    # As if DNS changed after creation: the host now resolves to loopback, which the worker's
    # allowlist (127.0.0.1:<port> only) does not cover for this name.
    Job.objects.filter(id=job.id).update(target_url=f"https://localhost:{http_target.port}/ok")
    publish_run(run.id, 1)

    done = wait_for_state(run, RunState.FAILED, worker=worker)

    assert "refused by HTTP policy" in done.last_error
    assert "not a public address" in done.last_error
    assert http_target.requests == []
