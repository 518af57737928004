"""Plain factory functions for tenants, jobs and runs."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.models import Job, JobRun, Tenant
from jobs.services.dedup import dedup_key_for
from jobs.services.jobs import JobInput, job_create
from jobs.states import RunState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_names = itertools.count(1)


def tenant_factory(name: str | None = None, *, now: datetime = T0) -> Tenant:
    return Tenant.objects.create(name=name or f"tenant-{next(_names)}", created_at=now)


def job_factory(tenant: Tenant | None = None, *, now: datetime = T0, **overrides: Any) -> Job:
    tenant = tenant or tenant_factory(now=now)
    fields: dict[str, Any] = {
        "name": f"job-{next(_names)}",
        "target_kind": "callable",
        "target_name": "demo.heartbeat",
    }
    if not {"cron", "interval", "run_at"} & overrides.keys():
        fields["cron"] = "* * * * *"
    fields.update(overrides)
    return job_create(tenant=tenant, data=JobInput(**fields), now=now)


def run_factory(job: Job, *, scheduled_for: datetime | None = None, **overrides: Any) -> JobRun:
    scheduled_for = scheduled_for or job.next_fire_at or T0
    fields: dict[str, Any] = {
        "job": job,
        "tenant_id": job.tenant_id,
        "partition": job.partition,
        "scheduled_for": scheduled_for,
        "state": RunState.PENDING,
        "due_at": scheduled_for,
        "dedup_key": dedup_key_for(job.id, scheduled_for),
        "created_at": scheduled_for - timedelta(seconds=1),
    }
    fields.update(overrides)
    return JobRun.objects.create(**fields)


def running_run_factory(job: Job, *, scheduled_for: datetime, **overrides: Any) -> JobRun:
    """A run a worker has started: attempt 1, leased for a minute from T0."""
    fields: dict[str, Any] = {
        "state": RunState.RUNNING, "attempt": 1, "started_at": T0,
        "lease_until": T0 + timedelta(minutes=1), "due_at": None,
    }  # fmt: skip
    return run_factory(job, scheduled_for=scheduled_for, **{**fields, **overrides})


def dead_run_factory(job: Job, *, scheduled_for: datetime, **overrides: Any) -> JobRun:
    """A run that used up its three attempts, finished at T0."""
    fields: dict[str, Any] = {
        "state": RunState.DEAD, "attempt": 3, "finished_at": T0, "due_at": None,
    }  # fmt: skip
    return run_factory(job, scheduled_for=scheduled_for, **{**fields, **overrides})
