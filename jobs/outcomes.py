"""What an attempt's result means for its run: retry, fail, dead-letter, cancel or succeed."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from beat_engine.backoff import RetryPolicy, has_attempts_left


class ResultKind(enum.Enum):
    SUCCESS = "success"
    # Worth another attempt: exceptions, 408/429/5xx, connection errors.
    RETRYABLE = "retryable"
    # Retrying cannot help: most 4xx, 3xx (redirects are not followed), missing target, SSRF.
    PERMANENT = "permanent"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    # The key of this firing was already recorded by an earlier attempt: the effect happened.
    DUPLICATE = "duplicate"
    # The heartbeat found the attempt no longer current; its outcome write will be refused.
    LOST = "lost"
    # The worker is stopping and the attempt could not finish in time: ended and handed back
    # as the reaper would after its lease (jobs/worker_shutdown.py): the next attempt at once.
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class TargetResult:
    kind: ResultKind
    result: Any = None
    error: str = ""
    # The shortest wait before the next attempt that the target asked for (an HTTP
    # Retry-After, already capped by RETRY_AFTER_MAX_S); the backoff never undercuts it.
    retry_after: timedelta | None = None
    # The traceback of an exception the target raised, kept with the attempt's stored result.
    traceback: str = ""


class Disposition(enum.Enum):
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    DEAD = "dead"
    CANCEL = "cancel"


RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})


def classify_http_status(status: int, *, retry_on_client_error: bool) -> ResultKind:
    if 200 <= status < 300:
        return ResultKind.SUCCESS
    if status >= 500 or status in RETRYABLE_CLIENT_STATUSES:
        return ResultKind.RETRYABLE
    if 400 <= status < 500 and retry_on_client_error:
        return ResultKind.RETRYABLE
    # 1xx final, 3xx (a redirect we refuse to follow) and the remaining 4xx.
    return ResultKind.PERMANENT


def disposition_for(kind: ResultKind, *, attempt: int, policy: RetryPolicy) -> Disposition:
    """Where the run goes after ``attempt`` ended with ``kind``.

    A timeout counts as a failure of the attempt, so it is retried while attempts are left; a
    cancelled run is never retried; only retryable failures spend the attempt budget.
    """
    if kind in (ResultKind.SUCCESS, ResultKind.DUPLICATE):
        return Disposition.SUCCEED
    if kind in (ResultKind.CANCELLED, ResultKind.LOST):
        return Disposition.CANCEL
    if kind == ResultKind.PERMANENT:
        return Disposition.FAIL
    return Disposition.RETRY if has_attempts_left(attempt, policy) else Disposition.DEAD


def bounded_result(value: Any, *, max_bytes: int) -> Any:
    """A JSON value of at most about ``max_bytes``, so one chatty target cannot bloat the table."""
    try:
        encoded = json.dumps(value, allow_nan=False, default=str)
    except (TypeError, ValueError):
        encoded = json.dumps(repr(value))
    if len(encoded.encode()) <= max_bytes:
        return json.loads(encoded)
    return {"truncated": True, "preview": encoded.encode()[:max_bytes].decode(errors="ignore")}
