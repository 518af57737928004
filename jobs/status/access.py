"""Who may see the status pages, and which tenant's rows they see.

Anonymous visitors go to the admin login; signed-in accounts that are not staff, and staff
not assigned to a tenant, get 403. A superuser sees every tenant and may narrow the pages to
one with ``?tenant=<id>``; tenant staff (jobs.models.TenantMember) see only their tenant, and
another tenant's job or run is a 404, exactly as if it did not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import update_wrapper
from typing import Any, Concatenate, ParamSpec
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from jobs.models import Job, JobRun, Tenant

P = ParamSpec("P")


@dataclass(frozen=True)
class Scope:
    """The tenant a request is limited to (None: all tenants, for superusers only)."""

    tenant: Tenant | None
    # Superusers may pick a tenant; tenant staff are pinned to theirs.
    can_choose: bool

    @property
    def tenant_id(self) -> int | None:
        return self.tenant.pk if self.tenant is not None else None

    @property
    def query(self) -> str:
        """``?tenant=..`` to keep a superuser's chosen tenant on links, else empty."""
        if self.can_choose and self.tenant is not None:
            return "?" + urlencode({"tenant": self.tenant.pk})
        return ""

    def jobs(self) -> QuerySet[Job]:
        jobs = Job.objects.all()
        return jobs if self.tenant is None else jobs.filter(tenant=self.tenant)

    def runs(self) -> QuerySet[JobRun]:
        runs = JobRun.objects.all()
        return runs if self.tenant is None else runs.filter(tenant=self.tenant)

    def tenants(self) -> QuerySet[Tenant]:
        """Tenants offered by the tenant filter: every one for a superuser, else none."""
        return Tenant.objects.order_by("name") if self.can_choose else Tenant.objects.none()


def _chosen_tenant(request: HttpRequest) -> Tenant | None:
    raw = request.GET.get("tenant", "")
    if not raw:
        return None
    try:
        return Tenant.objects.get(pk=int(raw))
    except (ValueError, Tenant.DoesNotExist):
        raise Http404("no such tenant") from None


def scope_for(request: HttpRequest) -> Scope:
    """Raises PermissionDenied for accounts that may not see any tenant."""
    user = request.user
    if not user.is_active or not user.is_staff:
        raise PermissionDenied("the status pages are for staff accounts")
    if user.is_superuser:
        return Scope(tenant=_chosen_tenant(request), can_choose=True)
    membership = getattr(user, "tenant_membership", None)
    if membership is None:
        raise PermissionDenied("this account is not assigned to a tenant")
    return Scope(tenant=membership.tenant, can_choose=False)


def status_view(
    view: Callable[Concatenate[HttpRequest, Scope, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """Login (through the admin's login page) and tenant scope for a status page.

    The wrapped view takes the request and its Scope, then the URL's arguments."""

    def wrapper(request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        return view(request, scope_for(request), *args, **kwargs)

    update_wrapper(wrapper, view)
    return wrapper


def job_or_404(scope: Scope, job_id: uuid.UUID) -> Job:
    try:
        return scope.jobs().select_related("tenant").get(id=job_id)
    except Job.DoesNotExist:
        raise Http404("no such job") from None


def run_or_404(scope: Scope, run_id: uuid.UUID) -> JobRun:
    try:
        return scope.runs().select_related("job", "tenant").get(id=run_id)
    except JobRun.DoesNotExist:
        raise Http404("no such run") from None


def render_page(
    request: HttpRequest,
    scope: Scope,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    """Render a status template with what base.html needs: the scope, the navigation."""
    from jobs.status.urls import NAV

    return render(request, template, {"scope": scope, "nav": NAV, **context}, status=status)
