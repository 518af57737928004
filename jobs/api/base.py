"""The base of every /v1 view: tenant auth, throttling, request ids, one error handler."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from django.http import HttpRequest
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from beat_engine.clock import Clock, SystemClock
from jobs.api.auth import TenantKeyAuthentication, request_tenant
from jobs.api.errors import exception_handler
from jobs.api.parsers import StrictJSONParser
from jobs.api.serializers_runs import ErrorOut
from jobs.api.throttling import TenantRateThrottle
from jobs.models import Tenant

logger = logging.getLogger("jobs.api")

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

_ERROR_TEXT = {
    400: "Bad input: field-level messages in error.fields; nothing was written.",
    401: "Missing, malformed or revoked API key.",
    404: "No such object for this tenant.",
    410: "Archived: the runs asked for left the hot history; error.archived says which days.",
    409: "Stale version, conflicting state, live dependents or a lost race; nothing was changed.",
    422: "The idempotency key was already used with a different body.",
    429: "Too many requests for this tenant; see Retry-After.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Error responses for the schema; every operation also documents 400, 401 and 429."""
    wanted = sorted({400, 401, 429, *codes})
    return {code: OpenApiResponse(ErrorOut, description=_ERROR_TEXT[code]) for code in wanted}


def request_id_from(request: Request | HttpRequest) -> str:
    """The id a response carries: the caller's, if it is 1-128 of [A-Za-z0-9._:-], else new.

    Every response under /v1 follows this rule, the 404 and 500 handlers outside DRF included.
    """
    given = request.META.get("HTTP_X_REQUEST_ID", "")
    # A caller's id is kept so logs join up across services; anything odd is replaced, since it
    # is echoed into a header and into logs.
    if isinstance(given, str) and _REQUEST_ID_RE.match(given):
        return given
    return uuid.uuid4().hex


class ApiView(APIView):
    authentication_classes = [TenantKeyAuthentication]  # noqa: RUF012 - DRF's own convention
    permission_classes = [IsAuthenticated]  # noqa: RUF012
    throttle_classes = [TenantRateThrottle]  # noqa: RUF012
    parser_classes = [StrictJSONParser]  # noqa: RUF012
    renderer_classes = [JSONRenderer]  # noqa: RUF012
    # The view is the edge: it reads the clock once per request and passes now= down.
    clock: Clock = SystemClock()

    def initialize_request(self, request: Any, *args: Any, **kwargs: Any) -> Request:
        drf_request = super().initialize_request(request, *args, **kwargs)
        # Set before authentication runs, so even a 401 carries the id.
        drf_request.request_id = request_id_from(drf_request)  # type: ignore[attr-defined]
        self.now = self.clock.now()
        return drf_request

    def get_exception_handler(self) -> Any:
        return exception_handler

    @property
    def tenant(self) -> Tenant:
        return request_tenant(self.request)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        request_id = getattr(request, "request_id", "")
        response[REQUEST_ID_HEADER] = request_id
        principal = getattr(request, "_user", None)
        logger.info(
            "api.request %s %s -> %s",
            request.method,
            request.path,
            response.status_code,
            extra={
                "request_id": request_id,
                "tenant": getattr(getattr(principal, "tenant", None), "pk", None),
                "status": response.status_code,
            },
        )
        return response
