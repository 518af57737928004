"""django-celery-results' own admin pages, kept to superusers.

Its TaskResult and GroupResult rows carry no tenant: an attempt's stored result is found by its
task id ("<run id>:<attempt>", jobs/services/run_results.py) and shown on the tenant-scoped run
page instead. Left as registered by the library, any staff user given its view permission would
read every tenant's results and tracebacks, so the library's pages answer only superusers.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django_celery_results.admin import GroupResultAdmin, TaskResultAdmin
from django_celery_results.models import GroupResult, TaskResult


class _SuperuserOnly:
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


class TenantlessTaskResultAdmin(_SuperuserOnly, TaskResultAdmin):
    pass


class TenantlessGroupResultAdmin(_SuperuserOnly, GroupResultAdmin):
    pass


for _model, _admin in (
    (TaskResult, TenantlessTaskResultAdmin),
    (GroupResult, TenantlessGroupResultAdmin),
):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)
    admin.site.register(_model, _admin)
