"""Building job DAGs for tests and moving their runs through outcomes without a worker."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from jobs.models import Job, JobRun, Tenant, TriggerRule
from jobs.services import runs
from jobs.services.jobs import JobInput, job_create
from jobs.states import RunState
from tests.support.factories import run_factory, tenant_factory

# A root schedule that never fires during a test: the runs come from the test.
YEARLY = "0 0 1 1 *"


def dag_jobs(
    edges: Iterable[tuple[str, str]],
    *,
    now: datetime,
    all_done: Iterable[str] = (),
    roots: dict[str, Any] | None = None,
    tenant: Tenant | None = None,
    **job_fields: Any,
) -> dict[str, Job]:
    """Jobs named by the letters in ``edges`` (parent, child), created through job_create:
    jobs without parents are roots (yearly, or ``roots``' schedule fields), the others depend
    on their parents (trigger rule all_done for those in ``all_done``)."""
    pairs = list(edges)
    names = sorted({name for pair in pairs for name in pair})
    parents = {name: [p for p, c in pairs if c == name] for name in names}
    done_rule = set(all_done)
    tenant = tenant or tenant_factory(now=now)
    jobs: dict[str, Job] = {}
    while len(jobs) < len(names):
        for name in names:
            if name in jobs or any(p not in jobs for p in parents[name]):
                continue
            fields: dict[str, Any] = {"name": f"{name}-{tenant.name}", **job_fields}
            if parents[name]:
                fields["depends_on"] = [jobs[p].id for p in parents[name]]
                fields["trigger_rule"] = (
                    TriggerRule.ALL_DONE if name in done_rule else TriggerRule.ALL_SUCCESS
                )
            else:
                fields.update(roots or {"cron": YEARLY})
            jobs[name] = _create(tenant, now=now, **fields)
    return jobs


def _create(tenant: Tenant, *, now: datetime, **fields: Any) -> Job:
    data: dict[str, Any] = {"target_kind": "callable", "target_name": "demo.heartbeat", **fields}
    return job_create(tenant=tenant, data=JobInput(**data), now=now)


def running(job: Job, *, scheduled_for: datetime, now: datetime) -> JobRun:
    """A run of ``job`` for T a worker has started (attempt 1)."""
    return run_factory(
        job, scheduled_for=scheduled_for, state=RunState.RUNNING, attempt=1, started_at=now,
        lease_until=now + timedelta(minutes=1), due_at=None,
    )  # fmt: skip


def start(run: JobRun, *, now: datetime) -> JobRun:
    """Move a pending child run to running as its next attempt, as engine and worker would."""
    moved = JobRun.objects.filter(id=run.id, state=RunState.PENDING).update(
        state=RunState.RUNNING, attempt=run.attempt + 1, started_at=now, queued_at=now,
        lease_until=now + timedelta(minutes=1), due_at=None,
    )  # fmt: skip
    assert moved == 1, JobRun.objects.get(id=run.id).state
    return JobRun.objects.get(id=run.id)


def succeed(run: JobRun, *, now: datetime) -> None:
    assert runs.run_succeed(run_id=run.id, attempt=run.attempt, now=now)


def run_for(job: Job, t: datetime) -> JobRun | None:
    return JobRun.objects.filter(job=job, scheduled_for=t).first()


def the_run(job: Job, t: datetime) -> JobRun:
    """The job's run for T, which must exist."""
    run = run_for(job, t)
    assert run is not None, f"{job.name} has no run for {t.isoformat()}"
    return run


def states_for(jobs: dict[str, Job], t: datetime) -> dict[str, str | None]:
    """Each job's run state for T (None: no run)."""
    found = dict(
        JobRun.objects.filter(job__in=jobs.values(), scheduled_for=t).values_list("job_id", "state")
    )
    return {name: found.get(job.id) for name, job in jobs.items()}
