"""Field checks shared by the services, the API and the admin; each raises InvalidInput."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from beat_engine import priority_order
from beat_engine.backoff import RetryPolicy
from beat_engine.schedules import ScheduleError, ScheduleSpec, parse_timezone
from jobs.errors import InvalidInput, InvalidSchedule, TargetNotFound
from jobs.http_policy import check_url_allowed, split_url
from jobs.models import TargetKind

NAME_MAX = 200
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
PAYLOAD_MAX_DEPTH = 32
# RFC 9110 token characters for header names.
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")
FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "cookie",
        "idempotency-key",
        "x-scheduler-scheduled-for",
        "x-scheduler-attempt",
        "x-scheduler-job-id",
        "x-scheduler-run-id",
    }
)
MAX_TIMEOUT = timedelta(seconds=settings.JOB_MAX_TIMEOUT_S)
MAX_JITTER = timedelta(hours=1)
MAX_INTERVAL = timedelta(days=366)
# An instant asked about ("why didn't it fire then?") lies in the range schedules are evaluated
# over; outside it the evaluator's date arithmetic would overflow rather than answer.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(2200, 1, 1, tzinfo=UTC)


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name", "must be a non-empty string")
    if len(name) > NAME_MAX:
        raise InvalidInput("name", f"must be at most {NAME_MAX} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidInput("name", "must not contain control characters")
    return name.strip()


def validate_timezone(name: str) -> None:
    try:
        parse_timezone(name)
    except ScheduleError as exc:
        raise InvalidSchedule(exc.field, str(exc)) from None


def validate_schedule(spec: ScheduleSpec, *, now: datetime | None = None) -> None:
    try:
        spec.validate(now=now)
    except ScheduleError as exc:
        raise InvalidSchedule(exc.field, str(exc)) from None
    if spec.interval is not None and spec.interval > MAX_INTERVAL:
        raise InvalidSchedule("interval", "must be at most 366 days")


def validate_run_at(run_at: datetime, *, now: datetime) -> None:
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidSchedule("run_at", "must include a UTC offset (for example 2026-01-01T09:00Z)")
    conf = settings.SCHEDULER
    if run_at < now - timedelta(seconds=conf["RUN_AT_GRACE_S"]):
        raise InvalidSchedule(
            "run_at", f"is more than {conf['RUN_AT_GRACE_S']} seconds in the past"
        )
    if run_at > now + timedelta(days=conf["RUN_AT_MAX_HORIZON_DAYS"]):
        raise InvalidSchedule(
            "run_at", f"is more than {conf['RUN_AT_MAX_HORIZON_DAYS']} days in the future"
        )


def validate_instant(field: str, at: datetime) -> datetime:
    """``at`` in UTC, or InvalidInput when it is naive or outside the evaluated range."""
    if at.utcoffset() is None:
        raise InvalidInput(field, "must include a UTC offset (for example 2026-01-01T09:00Z)")
    try:
        in_utc = at.astimezone(UTC)
    except OverflowError:
        in_utc = EARLIEST_INSTANT - timedelta(days=1) if at.year < 2000 else LATEST_INSTANT
    if not EARLIEST_INSTANT <= in_utc < LATEST_INSTANT:
        raise InvalidInput(
            field, f"must lie from {EARLIEST_INSTANT:%Y-%m-%d} to before {LATEST_INSTANT:%Y-%m-%d}"
        )
    return in_utc


def _check_json_value(value: Any, depth: int) -> None:
    if depth > PAYLOAD_MAX_DEPTH:
        raise InvalidInput("payload", f"is nested deeper than {PAYLOAD_MAX_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput("payload", "must not contain NaN or Infinity")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput("payload", "object keys must be strings")
            _check_json_value(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_json_value(item, depth + 1)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise InvalidInput("payload", f"holds a {type(value).__name__}, which is not JSON")


def validate_payload(payload: Any) -> None:
    _check_json_value(payload, 0)
    try:
        encoded = json.dumps(payload, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidInput("payload", f"is not valid JSON: {exc}") from None
    limit = settings.SCHEDULER["PAYLOAD_MAX_BYTES"]
    if len(encoded) > limit:
        raise InvalidInput("payload", f"is {len(encoded)} bytes; the limit is {limit} bytes")


def validate_headers(headers: Any) -> None:
    if not isinstance(headers, dict):
        raise InvalidInput("target.headers", "must be an object of header names to values")
    if len(headers) > 50:
        raise InvalidInput("target.headers", "at most 50 headers")
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME_RE.match(name):
            raise InvalidInput("target.headers", f"{name!r} is not a valid header name")
        if name.lower() in FORBIDDEN_HEADERS:
            raise InvalidInput("target.headers", f"{name!r} is set by the scheduler itself")
        if not isinstance(value, str) or len(value) > 4096:
            raise InvalidInput("target.headers", f"value of {name!r} must be a short string")
        if any(ch in value for ch in "\r\n\x00") or any(
            ord(ch) < 32 and ch != "\t" for ch in value
        ):
            raise InvalidInput("target.headers", f"value of {name!r} has control characters")


def validate_url_shape(url: str) -> None:
    """Syntax and scheme only; address policy (SSRF) is checked by jobs.http_policy."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise InvalidInput("target.url", "must be a URL of at most 2048 characters")
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise InvalidInput("target.url", "must not contain spaces or control characters")
    parts, _ = split_url(url)
    if parts.scheme not in {"https", "http"}:
        raise InvalidInput("target.url", "must use https (or http where allowlisted)")
    if not parts.hostname:
        raise InvalidInput("target.url", "must name a host")
    if parts.username or parts.password:
        raise InvalidInput("target.url", "must not carry credentials; use headers")


def validate_target(kind: str, name: str, url: str, headers: Any) -> None:
    if kind not in TargetKind.values:
        raise InvalidInput(
            "target.kind", f"must be one of {', '.join(TargetKind.values)}, got {kind!r}"
        )
    # Checked on the whole definition, so a PATCH that sends only a url to a callable job is
    # refused instead of storing a field the job's kind never reads (or validates).
    if kind == TargetKind.HTTP:
        if name:
            raise InvalidInput("target.name", "an http target has a url and headers, not a name")
    else:
        if url:
            raise InvalidInput(
                "target.url", f"a {kind} target has only a name; a url needs kind 'http'"
            )
        if headers:
            raise InvalidInput(
                "target.headers", f"a {kind} target has only a name; headers need kind 'http'"
            )
    if kind == TargetKind.CALLABLE:
        from jobs.registry import registry

        if not name or registry.get(name) is None:
            raise TargetNotFound("target.name", f"no callable is registered as {name!r}")
    elif kind == TargetKind.TASK:
        from scheduler_project.celery import app

        if not name or name not in app.tasks:
            raise TargetNotFound("target.name", f"no Celery task is registered as {name!r}")
    else:
        validate_url_shape(url)
        validate_headers(headers)
        check_url_allowed(url)


def validate_queue(queue: str) -> None:
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        raise InvalidInput("queue", "must be 1-100 letters, digits, '.', '_' or '-'")


# The scale's one description, for the API schema and the admin form (docs/limits.md).
PRIORITY_HELP = (
    f"{priority_order.HIGHEST} (highest) to {priority_order.LOWEST} (lowest), default "
    f"{priority_order.DEFAULT}. Under contention a higher priority is claimed and started first; "
    "a reserved share of starts (SCHEDULER_LOW_PRIORITY_SHARE, 10 % by default) goes to the "
    "lowest priority waiting, so it never starves."
)


def validate_policies(
    *,
    retry: RetryPolicy,
    timeout: timedelta,
    jitter_window: timedelta,
    priority: int,
    catchup_limit: int,
    starting_deadline: timedelta | None,
) -> None:
    try:
        retry.validate()
    except ValueError as exc:
        raise InvalidInput("retries", str(exc)) from None
    if not timedelta(seconds=1) <= timeout <= MAX_TIMEOUT:
        raise InvalidInput(
            "timeout", f"must be between 1 second and {int(MAX_TIMEOUT.total_seconds())} seconds"
        )
    if not timedelta(0) <= jitter_window <= MAX_JITTER:
        raise InvalidInput("jitter", "must be between 0 and 3600 seconds")
    if not priority_order.HIGHEST <= priority <= priority_order.LOWEST:
        raise InvalidInput(
            "priority",
            f"must be between {priority_order.HIGHEST} (highest) and {priority_order.LOWEST} "
            "(lowest)",
        )
    if not 1 <= catchup_limit <= 1000:
        raise InvalidInput("catchup.limit", "must be between 1 and 1000")
    if starting_deadline is not None and starting_deadline < timedelta(seconds=1):
        raise InvalidInput("catchup.starting_deadline", "must be at least 1 second")


# A bound on the value only: far above any worker fleet, low enough that counting a tenant's
# running runs under its lock stays a short index scan (docs/limits.md, "Running concurrency").
MAX_RUNNING_LIMIT = 100_000


def validate_running_limit(field: str, limit: Any) -> None:
    """A running limit is None (no limit) or a whole number from 1 to MAX_RUNNING_LIMIT."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInput(field, "must be a whole number or null")
    if not 1 <= limit <= MAX_RUNNING_LIMIT:
        raise InvalidInput(
            field, f"must be between 1 and {MAX_RUNNING_LIMIT}, or null for no limit"
        )
