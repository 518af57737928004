"""Operators' changes of a job, recorded for "why didn't it fire?" (jobs.services.explain)."""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Now

from jobs.models import Job
from jobs.models_reasons import JobEvent, JobEventKind


def job_schedule_fields(job: Job) -> dict[str, Any]:
    """What decides the job's firings, as it is now: kept with an edit, so a firing the old
    schedule had (or lacked) can still be explained after the change."""
    return {
        "kind": job.kind,
        "cron": job.cron_expression,
        "interval_seconds": job.interval_seconds,
        "anchor_at": job.anchor_at.isoformat() if job.anchor_at else None,
        "run_at": job.run_at.isoformat() if job.run_at else None,
        "timezone": job.timezone,
    }


def job_event_record(job: Job, kind: JobEventKind, *, detail: dict[str, Any] | None = None) -> None:
    """One row in the change's own transaction, stamped with the database's clock (Now() is
    the transaction's start on the server), so it commits or rolls back with the change."""
    JobEvent.objects.create(
        job_id=job.id,
        tenant_id=job.tenant_id,
        kind=kind,
        at=Now(),
        version=job.version,
        detail=detail or {},
    )
