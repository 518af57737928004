"""URL routes: the admin, the REST API under /v1, health and Prometheus metrics."""

from __future__ import annotations

import redis
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

from jobs.api.base import REQUEST_ID_HEADER, request_id_from
from jobs.api.errors import error_body
from jobs.metrics import counters


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format of the counters every process keeps in Redis."""
    try:
        values = counters()
    except redis.RedisError:
        return HttpResponse("# counters unavailable: Redis unreachable\n", status=503)
    lines: list[str] = []
    typed: set[str] = set()
    for series in sorted(values):
        base = series.partition("{")[0]
        if base not in typed:
            typed.add(base)
            lines.append(f"# TYPE {base} counter")
        lines.append(f"{series} {values[series]}")
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")


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
