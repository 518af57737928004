"""The soak's tenant, API key and jobs, written through the job services (validation included)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bench.soak.workload import JobPlan

RESET_SQL = (
    "TRUNCATE jobs_deadletter, jobs_runattempt, jobs_dedupkey, jobs_jobrun, jobs_job,"
    " jobs_partitionepoch, jobs_apikey, jobs_tenantmember, jobs_tenant CASCADE"
)


@dataclass(frozen=True)
class SeededJob:
    job_id: str
    anchor: datetime
    interval: timedelta
    critical: bool
    path: str


def migrate_and_reset() -> None:
    """Empty tables and an empty Redis: messages and leases a previous soak left in Redis's
    append-only file would otherwise be served first, for runs that no longer exist."""
    import redis
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(RESET_SQL)
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.flushall()
    finally:
        client.close()


def seed_jobs(
    plans: list[JobPlan], *, start: datetime, port: int, now: datetime
) -> tuple[int, str, list[SeededJob]]:
    """Create the tenant, an API key and one interval job per plan; (tenant id, key, jobs)."""
    from jobs.models import CatchUpPolicyChoice, Job
    from jobs.services.jobs import JobInput, job_build
    from jobs.services.tenants import api_key_create, tenant_create

    tenant = tenant_create(name="soak", now=now)
    _, key = api_key_create(tenant=tenant, name="soak", now=now)
    built, seeded = [], []
    for plan in plans:
        anchor = start + timedelta(milliseconds=plan.offset_ms)
        data = JobInput(
            name=plan.name,
            target_kind="http",
            target_url=f"http://127.0.0.1:{port}{plan.path}",
            interval=timedelta(seconds=plan.interval_s),
            anchor_at=anchor,
            payload={"job": plan.name},
            max_attempts=3,
            retry_base_delay=timedelta(seconds=1),
            retry_max_delay=timedelta(seconds=3),
            timeout=timedelta(seconds=30),
            # Every firing a beat outage delays is still run: an outage never excuses a loss.
            catchup_policy=CatchUpPolicyChoice.REPLAY_ALL,
            critical=plan.critical,
        )
        job = job_build(tenant=tenant, data=data, now=now)
        built.append(job)
        seeded.append(
            SeededJob(str(job.id), anchor, timedelta(seconds=plan.interval_s), plan.critical,
                      plan.path)
        )  # fmt: skip
    # Before any beat node starts, so every node loads them at start-up; no change notices.
    Job.objects.bulk_create(built, batch_size=1000)
    return tenant.id, key, seeded
