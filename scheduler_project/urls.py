"""URL routes: the admin, the REST API under /v1, and health."""

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health, name="health"),
]
