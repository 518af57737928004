"""API-facing job writes: idempotent create, bulk create, and PATCH (definition plus status)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from jobs.errors import IdempotencyKeyReused, InvalidInput, VersionConflict
from jobs.models import Job, JobStatus, Tenant
from jobs.notify import notify_job_changed
from jobs.services import dependencies
from jobs.services.jobs import (
    JobInput,
    job_build,
    job_create,
    job_input_from,
    job_pause,
    job_resume,
    job_update,
)

BULK_MAX = 1000


def _replay(job: Job, request_hash: str) -> Job:
    # IETF Idempotency-Key draft: the same key with a different body is a client error (422).
    if job.request_hash != request_hash:
        raise IdempotencyKeyReused(job.idempotency_key)
    return job


def _by_key(tenant: Tenant, key: str) -> Job | None:
    return Job.objects.filter(tenant=tenant, idempotency_key=key).first()


def job_create_idempotent(
    *, tenant: Tenant, data: JobInput, idempotency_key: str, request_hash: str, now: datetime
) -> tuple[Job, bool]:
    """Create a job, or return the job an earlier request with the same key created.

    Returns (job, created). Deliberately not atomic as a whole: when two identical requests
    race, the loser's INSERT waits for the winner's commit and fails on
    job_unique_idempotency_key (or on the live-name constraint, whichever index Postgres checks
    first); the read after that failure runs in a fresh statement and sees the winner's row.
    """
    if not idempotency_key:
        return job_create(tenant=tenant, data=data, now=now), True
    existing = _by_key(tenant, idempotency_key)
    if existing is not None:
        return _replay(existing, request_hash), False
    try:
        job = job_create(
            tenant=tenant,
            data=data,
            now=now,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
        )
    except (IntegrityError, InvalidInput):
        winner = _by_key(tenant, idempotency_key)
        if winner is None:
            raise
        return _replay(winner, request_hash), False
    return job, True


def _edges_create_many(built: Sequence[Job], items: Sequence[JobInput], *, now: datetime) -> None:
    # Parents are existing jobs (a new job's id is not known to the client), so no item can
    # close a cycle; each item's roots are checked as a single create checks them.
    for index, (job, data) in enumerate(zip(built, items, strict=True)):
        if not data.depends_on:
            continue
        try:
            dependencies.edges_create_for_new(job, data.depends_on, now=now)
        except InvalidInput as exc:
            raise InvalidInput(f"jobs[{index}].{exc.field}", exc.message) from None


@transaction.atomic
def job_create_many(*, tenant: Tenant, items: Sequence[JobInput], now: datetime) -> list[Job]:
    """Validate every job, then insert them all in one statement; one bad item rejects all.

    Field names in errors carry the item index (``jobs[3].schedule``) so a client can find it.
    """
    if not 1 <= len(items) <= BULK_MAX:
        raise InvalidInput("jobs", f"give between 1 and {BULK_MAX} jobs")
    if any(data.depends_on for data in items):
        # Before any row is written or locked (one lock order, docs/architecture.md, Invariants).
        dependencies.lock_tenant_dag(tenant.id)
    built: list[Job] = []
    seen: dict[str, int] = {}
    for index, data in enumerate(items):
        try:
            job = job_build(tenant=tenant, data=data, now=now)
        except InvalidInput as exc:
            raise InvalidInput(f"jobs[{index}].{exc.field}", exc.message) from None
        if job.name in seen:
            raise InvalidInput(f"jobs[{index}].name", f"repeats the name of jobs[{seen[job.name]}]")
        seen[job.name] = index
        built.append(job)
    try:
        # The unique constraint decides, so the happy path costs no lookup: a pre-check by
        # name scanned the tenant's whole job list whenever the planner's row estimate was
        # stale, which made bulk registration slow down as the table grew.
        with transaction.atomic():
            Job.objects.bulk_create(built, batch_size=500)
    except IntegrityError as exc:
        if "job_unique_live_name_per_tenant" not in str(exc):
            raise
        taken = (
            Job.objects.filter(tenant=tenant, name__in=list(seen))
            .exclude(status=JobStatus.CANCELLED)
            .values_list("name", flat=True)
            .first()
        )
        field = f"jobs[{seen[taken]}].name" if taken is not None else "jobs"
        raise InvalidInput(field, f"a job named {taken!r} already exists") from None
    _edges_create_many(built, items, now=now)
    for job in built:
        notify_job_changed(job_id=str(job.id), partition=job.partition)
    return built


@transaction.atomic
def job_patch(
    *,
    job_id: uuid.UUID,
    changes: Mapping[str, Any],
    status: str | None,
    expected_version: int | None,
    now: datetime,
) -> Job:
    """Apply field ``changes`` (JobInput names) and then a status change, all or nothing.

    The current definition is read under the row lock, so fields the caller did not send are
    never overwritten with a stale copy read before someone else's update.
    """
    # A definition change may change the job's DAG: the tenant's DAG lock comes before the row
    # lock, FOR NO KEY UPDATE as every job lock (one lock order, docs/architecture.md,
    # Invariants).
    if changes:
        dependencies.lock_dag_of_job(job_id)
    job = Job.objects.select_for_update(no_key=True).get(id=job_id)
    if expected_version is not None and job.version != expected_version:
        raise VersionConflict(expected=expected_version, actual=job.version)
    version = job.version
    if changes:
        data = dataclasses.replace(job_input_from(job), **changes)
        job = job_update(job_id=job_id, data=data, expected_version=version, now=now)
        version = job.version
    if status == JobStatus.PAUSED:
        job = job_pause(job_id=job_id, expected_version=version, now=now)
    elif status == JobStatus.ACTIVE:
        job = job_resume(job_id=job_id, expected_version=version, now=now)
    elif status is not None:
        raise InvalidInput("status", "may be set to 'paused' or 'active'; DELETE cancels a job")
    return job
