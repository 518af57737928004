"""Invoking a run's target (registered callable, Celery task or HTTP endpoint) with its context."""

from __future__ import annotations

import http.client
import threading
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from jobs.errors import InvalidInput, SchedulerError
from jobs.http_client import HttpAborted, HttpCall, HttpResponse, HttpTimeout
from jobs.models import JobRun, TargetKind
from jobs.outcomes import ResultKind, TargetResult, bounded_result, classify_http_status
from jobs.registry import registry
from jobs.retry_after import RETRY_AFTER_STATUSES, http_date, retry_after_delay
from jobs.services.dedup import dedup_record
from jobs.states import RunState


class PermanentFailure(Exception):
    """Raised by a target to fail the run without retrying (bad input that will not change)."""


class StaleAttempt(SchedulerError):
    """record_key() found this attempt superseded: the caller's transaction must roll back."""


class AlreadyDone(SchedulerError):
    """record_key() found the firing's key already recorded: its side effect already happened."""


@dataclass(frozen=True)
class TargetSpec:
    """The job's fields that invoking its target needs, read by the statement that starts it."""

    kind: str
    name: str
    url: str
    headers: dict[str, Any]
    timeout: timedelta
    retry_on_client_error: bool
    # The job's rate-limit fields (jobs/target_limits.py): its bucket's group, own rate, burst.
    group: str = ""
    rate: float | None = None
    burst: int | None = None


@dataclass
class RunContext:
    """What a target learns about the firing it runs; HTTP targets get the same as headers."""

    job_id: uuid.UUID
    run_id: uuid.UUID
    tenant_id: int
    scheduled_for: datetime
    attempt: int
    idempotency_key: str
    payload: Any
    now: datetime
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def fencing_token(self) -> int:
        """Grows with every attempt; a target that stores it can refuse an older (zombie) one."""
        return self.attempt

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "run_id": str(self.run_id),
            "scheduled_for": self.scheduled_for.isoformat(),
            "attempt": self.attempt,
            "fencing_token": self.fencing_token,
            "idempotency_key": self.idempotency_key,
        }

    def record_key(self) -> None:
        """Record this firing's key in the caller's open transaction.

        Call it inside ``transaction.atomic()`` next to the side effect: both commit or neither
        (exactly once for effects in this database). Raises AlreadyDone when an earlier attempt
        committed the key, StaleAttempt when this attempt was superseded; either must abort the
        caller's transaction.
        """
        if not connection.in_atomic_block:
            raise RuntimeError("record_key() must be called inside transaction.atomic()")
        current = JobRun.objects.filter(
            id=self.run_id, attempt=self.attempt, state=RunState.RUNNING
        ).exists()
        if not current:
            raise StaleAttempt(f"attempt {self.attempt} of run {self.run_id} is no longer current")
        # A concurrent attempt inserting the same key blocks here until ours commits or rolls
        # back, then sees it: the unique key, not timing, makes the effect happen once.
        if not dedup_record(
            key=self.idempotency_key,
            tenant_id=self.tenant_id,
            job_id=self.job_id,
            run_id=self.run_id,
            now=self.now,
        ):
            raise AlreadyDone(f"firing {self.idempotency_key} already completed")


def http_headers(target: TargetSpec, context: RunContext) -> dict[str, str]:
    # The job's own headers first: validation forbids them from naming ours, and ours win anyway.
    return {
        **{str(k): str(v) for k, v in target.headers.items()},
        "Idempotency-Key": context.idempotency_key,
        "X-Scheduler-Scheduled-For": context.scheduled_for.isoformat(),
        "X-Scheduler-Attempt": str(context.attempt),
        "X-Scheduler-Job-Id": str(context.job_id),
        "X-Scheduler-Run-Id": str(context.run_id),
    }


def _max_bytes() -> int:
    return int(settings.SCHEDULER["HTTP_RESPONSE_MAX_BYTES"])


def _invoke_callable(target: TargetSpec, context: RunContext) -> TargetResult:
    entry = registry.get(target.name)
    if entry is None:
        return TargetResult(ResultKind.PERMANENT, error=f"no callable {target.name!r}")
    value = entry.func(context)
    return TargetResult(ResultKind.SUCCESS, bounded_result(value, max_bytes=_max_bytes()))


def _invoke_task(target: TargetSpec, context: RunContext) -> TargetResult:
    from scheduler_project.celery import app

    task = app.tasks.get(target.name)
    if task is None:
        return TargetResult(ResultKind.PERMANENT, error=f"no Celery task {target.name!r}")
    # Called in this process, not sent as a message: the run's lease, timeout, cancellation and
    # outcome then cover the task's work, and no result backend is needed to learn how it ended.
    value = task(context.payload, scheduler_context=context.as_dict())
    return TargetResult(ResultKind.SUCCESS, bounded_result(value, max_bytes=_max_bytes()))


def _invoke_http(target: TargetSpec, context: RunContext, call: HttpCall) -> TargetResult:
    try:
        response = call.post_json(
            target.url,
            context.payload,
            headers=http_headers(target, context),
            timeout_s=target.timeout.total_seconds(),
            max_bytes=_max_bytes(),
        )
    except InvalidInput as exc:
        # Re-checked at execution: DNS may now point somewhere the policy forbids.
        return TargetResult(ResultKind.PERMANENT, error=f"refused by HTTP policy: {exc}")
    except HttpTimeout as exc:
        return TargetResult(ResultKind.TIMEOUT, error=str(exc))
    except HttpAborted as exc:
        return TargetResult(ResultKind.CANCELLED, error=str(exc))
    except (OSError, http.client.HTTPException) as exc:
        return TargetResult(ResultKind.RETRYABLE, error=f"{type(exc).__name__}: {exc}")
    kind = classify_http_status(response.status, retry_on_client_error=target.retry_on_client_error)
    result = {
        "status": response.status,
        "body": response.body.decode(errors="replace"),
        "truncated": response.truncated,
    }
    if kind == ResultKind.SUCCESS:
        return TargetResult(kind, result)
    wait = _requested_wait(response, context) if kind == ResultKind.RETRYABLE else None
    error = f"HTTP {response.status}"
    if wait is not None:
        error += f", Retry-After: next attempt in {wait.total_seconds():g}s at the earliest"
    return TargetResult(kind, result, error, retry_after=wait)


def _requested_wait(response: HttpResponse, context: RunContext) -> timedelta | None:
    """The Retry-After wait of a 429/503, capped by RETRY_AFTER_MAX_S; None if there is none.

    An HTTP-date is measured from the response's own Date (the server's clock against the
    server's clock); without one, from the attempt's start, which only lengthens the wait.
    """
    if response.status not in RETRY_AFTER_STATUSES or response.retry_after is None:
        return None
    reference = (http_date(response.date) if response.date else None) or context.now
    wait = retry_after_delay(response.retry_after, now=reference)
    if wait is None:
        return None
    return min(wait, timedelta(seconds=int(settings.SCHEDULER["RETRY_AFTER_MAX_S"])))


def prepare_invocation(
    target: TargetSpec, context: RunContext
) -> tuple[Callable[[], TargetResult], Callable[[], None]]:
    """The call to run in the target thread, and how to abort it from the supervising thread."""
    if target.kind == TargetKind.HTTP:
        call = HttpCall()
        return (lambda: _invoke_http(target, context, call)), call.abort
    if target.kind == TargetKind.TASK:
        return (lambda: _invoke_task(target, context)), context.cancelled.set
    return (lambda: _invoke_callable(target, context)), context.cancelled.set


def invoke_guarded(invoke: Callable[[], TargetResult]) -> TargetResult:
    """Run ``invoke`` and turn what client code raises into a result."""
    try:
        return invoke()
    except AlreadyDone as exc:
        return TargetResult(ResultKind.DUPLICATE, error=str(exc))
    except StaleAttempt as exc:
        return TargetResult(ResultKind.LOST, error=str(exc))
    except PermanentFailure as exc:
        return TargetResult(
            ResultKind.PERMANENT,
            error=f"PermanentFailure: {exc}",
            traceback=traceback.format_exc(),
        )
    except Exception as exc:  # noqa: BLE001 - boundary: any error of client code is an outcome
        return TargetResult(
            ResultKind.RETRYABLE,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )


def job_timeout_s(target: TargetSpec) -> float:
    return max(target.timeout, timedelta(seconds=0.001)).total_seconds()
