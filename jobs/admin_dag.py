"""The job admin's "dependencies" panel: parents and children as links, and the DAG drawing."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from jobs.dag_drawing import dag_svg
from jobs.models import Job, JobDependency

# A parent may have thousands of children (fan-out); the page lists a bounded number of them.
CHILDREN_LISTED = 50


def _job_url(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def _links(edges: list[JobDependency], side: str) -> SafeString:
    return format_html_join(
        ", ",
        "<a href='{}'>{}</a> ({})",
        (
            (_job_url(getattr(edge, side)), getattr(edge, side).name, getattr(edge, side).status)
            for edge in edges
        ),
    )


def dependencies_panel(job: Job) -> SafeString:
    """Parents, children (bounded) and the drawing, or a dash for a job without edges."""
    parents = list(job.parent_edges.select_related("parent").order_by("parent__name"))
    children_qs = job.child_edges.select_related("child").order_by("child__name")
    children = list(children_qs[: CHILDREN_LISTED + 1])
    if not parents and not children:
        return format_html("{}", "-")
    more = ""
    if len(children) > CHILDREN_LISTED:
        children = children[:CHILDREN_LISTED]
        more = f" and {children_qs.count() - CHILDREN_LISTED} more"
    rows = format_html(
        "<p><b>trigger rule:</b> {}</p><p><b>parents:</b> {}</p><p><b>children:</b> {}{}</p>",
        job.trigger_rule,
        _links(parents, "parent") or "-",
        _links(children, "child") or "-",
        more,
    )
    # dag_svg escapes every text and attribute it writes (jobs/dag_drawing.py).
    drawing = mark_safe(dag_svg(job, link=_job_url))
    return format_html(
        "{}<div class='dag-drawing' style='overflow:auto;max-width:100%'>{}</div>", rows, drawing
    )


class JobDependenciesAdminMixin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Adds the read-only "dependencies" field to the job's change page."""

    @admin.display(description="dependencies")
    def dependencies(self, job: Job) -> SafeString:
        return dependencies_panel(job)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is None or "dependencies" in fields:
            return fields
        return (*fields, "dependencies")
