"""The web while no PostgreSQL primary answers: 503 with Retry-After, never 500.

During a failover every request that reaches the database fails until a standby is promoted.
That is the server being briefly unavailable, which HTTP spells 503 with a Retry-After telling
clients (and their retry loops) when to come back; a 500 would say the request itself broke
something. The connection that died with the old primary is dropped here, so the next request
connects through libpq's host list (DATABASE_URL with ``target_session_attrs=read-write``) and
finds the new primary. Nothing is retried inside the request: a POST whose commit outcome is
unknown is the client's to repeat, with its idempotency key (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse

from jobs.api.base import REQUEST_ID_HEADER, request_id_from
from jobs.api.errors import error_body
from jobs.db_failover import UNAVAILABLE_MESSAGE, connection_lost, web_request_unavailable


def database_unavailable(exc: BaseException | None) -> bool:
    return isinstance(exc, DatabaseError) and connection_lost(exc)


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """The 503 for a request that found no primary, in the API's error shape under /v1/."""
    headers = web_request_unavailable()
    response: HttpResponse
    if request.path.startswith("/v1/"):
        request_id = request_id_from(request)
        response = JsonResponse(
            error_body("unavailable", UNAVAILABLE_MESSAGE, request_id), status=503
        )
        response[REQUEST_ID_HEADER] = request_id
    else:
        response = HttpResponse(
            UNAVAILABLE_MESSAGE.capitalize() + ".\n", status=503, content_type="text/plain"
        )
    for name, value in headers.items():
        response[name] = value
    return response


class DatabaseUnavailableMiddleware:
    """Turns a view's lost-primary error into the 503. The API's exception handler does the same
    for DRF views (jobs/api/errors.py), and the 500 handler for errors raised outside views
    (scheduler_project/urls.py)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if database_unavailable(exception):
            return unavailable_response(request)
        return None
