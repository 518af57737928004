"""Routes under /status/. A page is one view, one template and one ``page(...)`` line here;
``nav=`` also lists it in the navigation bar of every page (base.html)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import URLPattern, path

from jobs.status import views_job, views_overview, views_run, views_upcoming, views_why

app_name = "status"

# (url name, title) of the pages shown in the navigation bar, in order.
NAV: list[tuple[str, str]] = []


def page(route: str, view: Callable[..., Any], name: str, *, nav: str = "") -> URLPattern:
    if nav:
        NAV.append((f"{app_name}:{name}", nav))
    return path(route, view, name=name)


urlpatterns = [
    page("", views_overview.overview, "overview", nav="Overview"),
    page("jobs/<uuid:job_id>/", views_job.job_detail, "job"),
    page("runs/<uuid:run_id>/", views_run.run_detail, "run"),
    page("upcoming/", views_upcoming.upcoming, "upcoming", nav="Upcoming load"),
    page("why/", views_why.why, "why", nav="Why didn't it fire?"),
]
