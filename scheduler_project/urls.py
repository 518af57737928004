"""URL routes: the admin, the REST API under /v1, health and Prometheus metrics."""

from __future__ import annotations

import sys

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

from jobs.api.base import REQUEST_ID_HEADER, request_id_from
from jobs.api.errors import error_body
from jobs.db_unavailable import database_unavailable, unavailable_response
from jobs.metrics import render


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics of this web's processes (all gunicorn workers in multiprocess mode);
    beat nodes and worker hosts serve theirs on their own ports (docs/operations.md)."""
    body, content_type = render()
    return HttpResponse(body, content_type=content_type)


def _json_error(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    # Paths no view matched (or a crash outside DRF) still answer in the API's error shape,
    # with the request id chosen by the same rule as every API view (docs/api.md).
    request_id = request_id_from(request)
    response = JsonResponse(error_body(code, message, request_id), status=status)
    response[REQUEST_ID_HEADER] = request_id
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/v1/"):
        return _json_error(request, 404, "not_found", "not found")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Called while the error is being handled; one raised outside a view (a middleware's
    # session write) that found no primary is a 503 too (jobs/db_unavailable.py).
    if database_unavailable(sys.exc_info()[1]):
        return unavailable_response(request)
    if request.path.startswith("/v1/"):
        return _json_error(request, 500, "internal", "internal error")
    return defaults.server_error(request)


handler404 = not_found
handler500 = server_error

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health, name="health"),
    path("metrics", metrics, name="metrics"),
    path("v1/", include("jobs.api.urls")),
    # Operators' status pages (docs/status.md).
    path("status/", include("jobs.status.urls")),
]
