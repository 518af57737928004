"""The one exception handler: every error of every endpoint leaves in the same JSON shape.

{"error": {"code": "invalid", "message": "...", "fields": {"schedule": ["..."]}},
 "request_id": "..."}
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    ObjectDoesNotExist,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.db import DatabaseError, DataError, IntegrityError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from jobs.db_failover import UNAVAILABLE_MESSAGE, connection_lost, web_request_unavailable
from jobs.errors import (
    HasDependents,
    HistoryArchived,
    IdempotencyKeyReused,
    InvalidInput,
    InvalidTransition,
    SchedulerError,
    VersionConflict,
)

logger = logging.getLogger(__name__)

# Service field names -> the names clients send, so a message points at the request's field.
SERVICE_TO_API_FIELD = {
    "interval": "interval_sec",
    "timeout": "timeout_sec",
    "jitter": "jitter_sec",
    "catchup.starting_deadline": "catchup.starting_deadline_sec",
    "start_at": "interval_sec",
}

Fields = dict[str, list[str]]


def error_body(
    code: str, message: str, request_id: str, fields: Fields | None = None, **extra: Any
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    error.update(extra)
    return {"error": error, "request_id": request_id}


def api_field(field: str) -> str:
    # Bulk errors carry an item prefix ("jobs[3].interval"); only the part after it is mapped.
    prefix, sep, name = field.rpartition("].")
    return f"{prefix}{sep}{SERVICE_TO_API_FIELD.get(name, name)}"


def flatten_detail(detail: Any, prefix: str = "") -> Fields:
    """DRF's nested error detail -> {"target.kind": [...], "jobs[2].name": [...]}."""
    fields: Fields = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "non_field_errors" if key == "non_field_errors" and not prefix else str(key)
            path = f"{prefix}.{name}" if prefix else name
            fields.update(flatten_detail(value, path))
    elif isinstance(detail, list) and detail and all(isinstance(d, dict | list) for d in detail):
        for index, value in enumerate(detail):
            fields.update(flatten_detail(value, f"{prefix}[{index}]"))
    elif isinstance(detail, list):
        fields[prefix or "body"] = [str(item) for item in detail]
    else:
        fields[prefix or "body"] = [str(detail)]
    return fields


def _scheduler_error(exc: SchedulerError, request_id: str) -> Response:
    if isinstance(exc, InvalidInput):
        field = api_field(exc.field)
        body = error_body("invalid", f"{field}: {exc.message}", request_id, {field: [exc.message]})
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, VersionConflict):
        body = error_body("version_conflict", str(exc), request_id, current_version=exc.actual)
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, HasDependents):
        dependents = [{"job_id": job_id, "name": name} for job_id, name in exc.dependents]
        body = error_body("has_dependents", str(exc), request_id, dependents=dependents)
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, HistoryArchived):
        body = error_body("archived", str(exc), request_id, archived=exc.span)
        return Response(body, status=status.HTTP_410_GONE)
    if isinstance(exc, InvalidTransition):
        return Response(
            error_body("invalid_transition", str(exc), request_id), status=status.HTTP_409_CONFLICT
        )
    if isinstance(exc, IdempotencyKeyReused):
        return Response(
            error_body("idempotency_key_reused", str(exc), request_id),
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    return Response(error_body("invalid", str(exc), request_id), status=status.HTTP_400_BAD_REQUEST)


def _api_exception(exc: exceptions.APIException, request_id: str) -> Response:
    headers: dict[str, str] = {}
    if isinstance(exc, exceptions.ValidationError):
        fields = {api_field(k): v for k, v in flatten_detail(exc.detail).items()}
        message = "; ".join(f"{name}: {msgs[0]}" for name, msgs in fields.items())
        return Response(
            error_body("invalid", message, request_id, fields), status=status.HTTP_400_BAD_REQUEST
        )
    if isinstance(exc, exceptions.ParseError | exceptions.UnsupportedMediaType):
        # Every body of this API is a JSON object: whatever else arrives, under whatever
        # Content-Type, is one client error with one code, so clients need not tell them apart.
        message = f"the body must be a JSON object ({exc.detail})"
        return Response(error_body("not_json", message, request_id), status=400)
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        headers["WWW-Authenticate"] = auth_header
    wait = getattr(exc, "wait", None)
    if wait is not None:
        headers["Retry-After"] = str(max(1, int(wait)))
    code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
    return Response(
        error_body(str(code), str(exc.detail), request_id), status=exc.status_code, headers=headers
    )


def _suspicious(exc: SuspiciousOperation, request_id: str) -> Response:
    # Django raises these while reading the request (body over DATA_UPLOAD_MAX_MEMORY_SIZE,
    # too many query fields, a Host header not in ALLOWED_HOSTS); outside DRF Django itself
    # would answer 400, so inside it they must not become a 500 either.
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = f"the request body is larger than {limit} bytes"
        return Response(
            error_body("too_large", message, request_id),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        message = f"more than {limit} query parameters"
        return Response(error_body("invalid", message, request_id), status=400)
    logger.warning("api.suspicious_request", extra={"request_id": request_id})
    return Response(error_body("bad_request", "the request is malformed", request_id), status=400)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF EXCEPTION_HANDLER for the API views; an unexpected error is logged and is a 500."""
    request = context.get("request")
    request_id = str(getattr(request, "request_id", "") or "")
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return Response(error_body("not_found", "not found", request_id), status=404)
    if isinstance(exc, SchedulerError):
        return _scheduler_error(exc, request_id)
    if isinstance(exc, SuspiciousOperation):
        return _suspicious(exc, request_id)
    if isinstance(exc, exceptions.APIException):
        return _api_exception(exc, request_id)
    if isinstance(exc, DatabaseError) and connection_lost(exc):
        # No primary reachable (a PostgreSQL failover): come back later, not "internal error".
        return Response(
            error_body("unavailable", UNAVAILABLE_MESSAGE, request_id),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers=web_request_unavailable(),
        )
    if isinstance(exc, IntegrityError):
        # A race lost to another request (same name, same firing instant): retrying decides.
        logger.info("api.conflict", extra={"request_id": request_id})
        return Response(
            error_body("conflict", "a concurrent change conflicted; retry", request_id),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, DataError):
        logger.warning("api.data_error", extra={"request_id": request_id})
        return Response(error_body("invalid", "a value cannot be stored", request_id), status=400)
    logger.error("api.unexpected_error", extra={"request_id": request_id}, exc_info=exc)
    return Response(
        error_body("internal", "internal error; quote the request id", request_id),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
