"""The job form's "depends on" field: parent jobs by name, as a person knows them.

A select of every job would not scale to a tenant with thousands of jobs, and ids mean nothing
to a person; names are unique among a tenant's live jobs (job_unique_live_name_per_tenant).
The names are only looked up here; whether they make a valid graph (no cycle, one root
schedule, same tenant) is jobs.services.dependencies' to judge, as for the API.
"""

from __future__ import annotations

import re
import uuid

from jobs.models import Job, JobStatus

_SEPARATORS = re.compile(r"[\n,]")


def parent_names_text(job: Job) -> str:
    """The job's parents' names, one per line, for the edit form."""
    names = job.parent_edges.order_by("parent__name").values_list("parent__name", flat=True)
    return "\n".join(names)


def split_names(text: str) -> list[str]:
    return [name.strip() for name in _SEPARATORS.split(text or "") if name.strip()]


def resolve_parents(
    names: list[str], *, tenant_id: int, current: Job | None
) -> tuple[list[uuid.UUID], list[str]]:
    """(parent ids, names not found) among the tenant's live jobs.

    A name that is one of the job's current parents keeps that parent even when it has been
    cancelled meanwhile, so saving an unrelated change does not fail on it.
    """
    live = dict(
        Job.objects.filter(tenant_id=tenant_id, name__in=names)
        .exclude(status=JobStatus.CANCELLED)
        .values_list("name", "id")
    )
    if current is not None:
        for name, parent_id in current.parent_edges.values_list("parent__name", "parent_id"):
            live.setdefault(name, parent_id)
    missing = [name for name in names if name not in live]
    return [live[name] for name in names if name in live], missing
