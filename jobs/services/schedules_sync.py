"""Sync schedules declared in client code (@scheduled) into a tenant's jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from jobs.decorators import ScheduleDeclaration
from jobs.models import Job, JobSource, JobStatus, Tenant
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


def _sync_one(
    job: Job | None, decl: ScheduleDeclaration, tenant: Tenant, report: SyncReport, *, now: datetime
) -> None:
    desired = decl.job_input()
    if job is None:
        job_create(tenant=tenant, data=desired, now=now)
        report.created.append(decl.name)
        return
    if job.source != JobSource.DECORATOR:
        report.conflicts.append(decl.name)
        return
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
    report = SyncReport(tenant_created=created)
    live = {
        job.name: job
        for job in Job.objects.filter(tenant=tenant).exclude(status=JobStatus.CANCELLED)
    }
    declared = {decl.name: decl for decl in declarations}
    for name, decl in sorted(declared.items()):
        _sync_one(live.get(name), decl, tenant, report, now=now)
    for name, job in sorted(live.items()):
        if name in declared or job.source != JobSource.DECORATOR:
            continue
        if job.status == JobStatus.ACTIVE:
            job_pause(job_id=job.id, now=now)
            Job.objects.filter(id=job.id).update(status_reason=REMOVED_REASON)
            report.paused.append(name)
    return report
