"""Sync schedules declared in client code (@scheduled) into a tenant's jobs."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from jobs.decorators import ScheduleDeclaration
from jobs.models import Job, JobSource, JobStatus, Tenant
from jobs.services.declared_dag import parents_first
from jobs.services.dependencies import lock_tenant_dag, parents_by_name
from jobs.services.jobs import job_create, job_input_from, job_pause, job_resume, job_update

# Marks jobs this sync paused, so a re-declared schedule is resumed but an operator's pause is not.
REMOVED_REASON = "paused by sync_schedules: its @scheduled declaration was removed from code"


@dataclass
class SyncReport:
    tenant_created: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    # A job of that name exists but was not declared in code: left alone, reported.
    conflicts: list[str] = field(default_factory=list)


def _parent_ids(
    decl: ScheduleDeclaration, written: dict[str, uuid.UUID], tenant: Tenant
) -> list[uuid.UUID]:
    # Declared parents were written earlier in this sync (parents_first); any other name is a
    # live job of the tenant created otherwise (API, admin).
    others = [name for name in decl.after if name not in written]
    found = dict(zip(others, parents_by_name(tenant, others), strict=True)) if others else {}
    return sorted(written.get(name) or found[name] for name in decl.after)


def _sync_one(
    job: Job | None,
    decl: ScheduleDeclaration,
    tenant: Tenant,
    report: SyncReport,
    *,
    parents: list[uuid.UUID],
    now: datetime,
) -> Job:
    desired = dataclasses.replace(decl.job_input(), depends_on=parents or None)
    if job is None:
        job = job_create(tenant=tenant, data=desired, now=now)
        report.created.append(decl.name)
        return job
    if job.source != JobSource.DECORATOR:
        report.conflicts.append(decl.name)
        return job
    current = job_input_from(job)
    # An interval's anchor is fixed at creation; keeping it keeps the firings where they were.
    desired = dataclasses.replace(
        desired, anchor_at=current.anchor_at if desired.interval else None
    )
    if desired != current:
        job = job_update(job_id=job.id, data=desired, expected_version=job.version, now=now)
        report.updated.append(decl.name)
    if job.status == JobStatus.PAUSED and job.status_reason == REMOVED_REASON:
        job_resume(job_id=job.id, now=now)
        report.resumed.append(decl.name)
    elif desired == current:
        report.unchanged.append(decl.name)
    return job


@transaction.atomic
def schedules_sync(
    *, tenant_name: str, declarations: Iterable[ScheduleDeclaration], now: datetime
) -> SyncReport:
    """Create, update, resume or pause the tenant's decorator jobs to match ``declarations``.

    Idempotent: the same declarations again change nothing and bump no version. A job whose
    declaration disappeared is paused (history kept), never deleted. The tenant is created when
    missing: the operator named it explicitly, and code is the source of truth for these jobs.
    """
    tenant, created = Tenant.objects.get_or_create(name=tenant_name, defaults={"created_at": now})
    # One transaction that pauses, resumes and updates many jobs: the tenant's DAG lock first,
    # before the first of their rows (one lock order, docs/architecture.md, Invariants).
    lock_tenant_dag(tenant.id)
    report = SyncReport(tenant_created=created)
    live = {
        job.name: job
        for job in Job.objects.filter(tenant=tenant).exclude(status=JobStatus.CANCELLED)
    }
    declared = {decl.name: decl for decl in declarations}
    # Two passes, so the order of declarations does not matter: read them all and put parents
    # first (refusing a cycle among them), then write each job with its parents' ids.
    written: dict[str, uuid.UUID] = {}
    for decl in parents_first(list(declared.values())):
        parents = _parent_ids(decl, written, tenant)
        job = _sync_one(live.get(decl.name), decl, tenant, report, parents=parents, now=now)
        written[decl.name] = job.id
    for name, job in sorted(live.items()):
        if name in declared or job.source != JobSource.DECORATOR:
            continue
        if job.status == JobStatus.ACTIVE:
            job_pause(job_id=job.id, now=now)
            Job.objects.filter(id=job.id).update(status_reason=REMOVED_REASON)
            report.paused.append(name)
    return report
