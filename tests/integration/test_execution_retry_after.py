"""Retry-After on an HTTP target's 429/503: the next attempt is not due before it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings

from beat_engine.clock import SystemClock
from jobs.models import JobRun, RunAttempt
from jobs.outcomes import ResultKind
from jobs.states import AttemptOutcome, RunState
from jobs.targets import RunContext, TargetSpec, prepare_invocation
from tests.support.factories import job_factory, run_factory
from tests.support.workers import (
    RETRY_AFTER_S,
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


def _first_attempt_waits(
    worker: CeleryWorker, http_target: HttpTarget, path: str, **overrides: Any
) -> timedelta:
    """Run attempt 1 against ``path``; how long after its end the next attempt is due."""
    fields: dict[str, Any] = {
        "target_kind": "http",
        "target_name": "",
        "target_url": http_target.url(path),
        "max_attempts": 3,
        # Without Retry-After the first retry would be due within a second.
        "retry_base_delay": timedelta(seconds=1),
        "retry_max_delay": timedelta(seconds=60),
        "now": _now(),
    }
    fields.update(overrides)
    job = job_factory(**fields)
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    publish_run(run.id, 1)
    waiting = wait_for_state(run, RunState.RETRY_WAIT, worker=worker)
    attempt = RunAttempt.objects.get(run=run, attempt=1)
    assert attempt.outcome == AttemptOutcome.FAILED
    assert attempt.finished_at is not None
    assert waiting.due_at is not None
    assert "Retry-After" in waiting.last_error, waiting.last_error
    return waiting.due_at - attempt.finished_at


def test_429_with_delay_seconds_holds_the_next_attempt_back(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    wait = _first_attempt_waits(worker, http_target, "/throttled")
    assert wait >= timedelta(seconds=RETRY_AFTER_S)
    assert len(http_target.hits("/throttled")) == 1


def test_503_with_an_http_date_holds_the_next_attempt_back(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    wait = _first_attempt_waits(worker, http_target, "/unavailable-until")
    # Measured against the response's Date, both whole seconds of the server's clock.
    assert wait >= timedelta(seconds=RETRY_AFTER_S)


def test_the_jobs_max_delay_caps_what_retry_after_asks_for(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    # The server asks for a day; the job allows at most 20 s between attempts.
    wait = _first_attempt_waits(
        worker, http_target, "/throttled-long", retry_max_delay=timedelta(seconds=20)
    )
    assert wait == timedelta(seconds=20)


def test_a_plain_503_keeps_the_ordinary_backoff(
    worker: CeleryWorker, http_target: HttpTarget
) -> None:
    job = job_factory(
        target_kind="http",
        target_name="",
        target_url=http_target.url("/unavailable"),
        max_attempts=3,
        retry_base_delay=timedelta(seconds=1),
        retry_max_delay=timedelta(seconds=60),
        now=_now(),
    )
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    publish_run(run.id, 1)
    waiting = wait_for_state(run, RunState.RETRY_WAIT, worker=worker)
    finished = RunAttempt.objects.get(run=run, attempt=1).finished_at
    assert waiting.due_at is not None
    assert finished is not None
    assert waiting.due_at - finished <= timedelta(seconds=1)
    assert JobRun.objects.get(id=run.id).last_error == "HTTP 503"


def test_the_retry_after_ceiling_setting_caps_the_wait(
    http_target: HttpTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process: the ceiling is read where the response is interpreted.
    monkeypatch.setitem(settings.SCHEDULER, "RETRY_AFTER_MAX_S", 90)
    spec = TargetSpec(
        kind="http",
        name="",
        url=http_target.url("/throttled-long"),
        headers={},
        timeout=timedelta(seconds=5),
        retry_on_client_error=False,
    )
    now = _now()
    context = RunContext(
        job_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        tenant_id=1,
        scheduled_for=now,
        attempt=1,
        idempotency_key="k",
        payload={},
        now=now,
    )
    invoke, _abort = prepare_invocation(spec, context)
    result = invoke()
    assert result.kind == ResultKind.RETRYABLE
    assert result.retry_after == timedelta(seconds=90)
