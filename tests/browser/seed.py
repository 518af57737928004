"""Data for the browser test and the docs' screenshots: a few tenants' worth of jobs and runs.

Everything is relative to ``now`` (the database's clock), so the overview's last hour, the job
page's recent runs and the upcoming load's next 24 hours all have something to draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import states

from jobs.models import DeadLetter, Job, JobRun, RunAttempt, Tenant
from jobs.models_reasons import JobEvent, JobEventKind
from jobs.services.dedup import dedup_key_for
from jobs.services.jobs import job_pause
from jobs.services.run_results import AttemptResult, result_record
from jobs.states import AttemptOutcome, RunState
from tests.support.factories import job_factory, tenant_factory

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Seeded:
    job: Job
    run: JobRun
    paused: Job
    paused_at: datetime
    # A firing of the paused job while it was paused, for the "why" page.
    missed_firing: datetime


def _lateness(i: int) -> timedelta:
    # Mostly tens of milliseconds, a bump mid-hour: something for the p50/p99 lines to show.
    spike = 2.4 if 28 <= i % 60 <= 31 else 0.0
    return timedelta(seconds=0.03 + (i * 37 % 11) / 100 + spike)


def _attempts(run: JobRun, count: int, *, failed_last: bool) -> None:
    for n in range(1, count + 1):
        queued = run.scheduled_for + (n - 1) * 20 * timedelta(seconds=1)
        started = queued + timedelta(milliseconds=40)
        finished = started + timedelta(milliseconds=350)
        ok = n == count and not failed_last
        error = "" if ok else f"ConnectionError: settlement API unreachable (attempt {n})"
        RunAttempt.objects.create(
            run=run, attempt=n, worker=f"worker-{1 + n % 2}@host:41{n}", queued_at=queued,
            started_at=started, finished_at=finished,
            outcome=AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED, error=error,
        )  # fmt: skip
        result_record(
            AttemptResult(
                run_id=run.id, attempt=n, job_id=run.job_id, target="payments.settle",
                status=states.SUCCESS if ok else states.FAILURE,
                result={"settled": 12 + n} if ok else None, error=error,
                traceback="" if ok else (
                    "Traceback (most recent call last):\n  File \"payments/settle.py\", line 42,"
                    " in settle\n    client.post(batch)\nConnectionError: settlement API "
                    "unreachable"
                ),
                worker=f"worker-{1 + n % 2}@host:41{n}", started_at=started, finished_at=finished,
            )
        )  # fmt: skip


def _runs(job: Job, now: datetime) -> JobRun:
    """An hour of per-minute runs: most succeed, a few retried, one dead-lettered."""
    last = now.replace(second=0, microsecond=0)
    shown: JobRun | None = None
    for i in range(60, 0, -1):
        due = last - i * MINUTE
        late = _lateness(i)
        retried = i % 13 == 0
        dead = i == 20
        attempts = 3 if dead else (2 if retried else 1)
        run = JobRun.objects.create(
            job=job, tenant_id=job.tenant_id, partition=job.partition, scheduled_for=due,
            state=RunState.DEAD if dead else RunState.SUCCEEDED, attempt=attempts,
            queued_at=due, published_at=due + late, started_at=due + late + timedelta(
                milliseconds=40), finished_at=due + late + timedelta(seconds=20 * attempts),
            lateness=late, start_lag=late + timedelta(milliseconds=40),
            dedup_key=dedup_key_for(job.id, due), worker="worker-1@host:411",
            last_error="ConnectionError: settlement API unreachable (attempt 3)" if dead else "",
            result=None if dead else {"settled": 12 + attempts}, created_at=due - MINUTE,
        )  # fmt: skip
        _attempts(run, attempts, failed_last=dead)
        if dead:
            DeadLetter.objects.create(
                run=run, job=job, tenant_id=job.tenant_id, attempts=3,
                last_error=run.last_error, moved_at=due + timedelta(seconds=60),
            )  # fmt: skip
        if retried:
            shown = run
    assert shown is not None
    return shown


def seed(now: datetime) -> Seeded:
    created = now - timedelta(days=1)
    payments, reports = tenant_factory("payments", now=created), tenant_factory("reports")
    marketing, ops = tenant_factory("marketing"), tenant_factory("ops")
    job = job_factory(
        payments, name="settle-invoices", cron="* * * * *", target_name="demo.heartbeat",
        max_attempts=3, now=created,
    )  # fmt: skip
    for i in range(40):
        # The midnight herd: every nightly report at 00:00 UTC, no jitter.
        job_factory(reports, name=f"nightly-report-{i:02d}", cron="0 0 * * *", now=created)
    for i in range(15):
        job_factory(
            marketing, name=f"newsletter-{i:02d}", cron="0 9 * * *", timezone="Europe/Paris",
            jitter_window=timedelta(minutes=10), now=created,
        )  # fmt: skip
    for i in range(6):
        job_factory(
            ops, name=f"health-probe-{i}", interval=timedelta(minutes=5),
            anchor_at=created + timedelta(seconds=40 * i), now=created,
        )  # fmt: skip
    paused = job_factory(ops, name="rotate-logs", cron="0 * * * *", now=created)
    paused_at = now - timedelta(hours=3, minutes=10)
    job_pause(job_id=paused.id, now=paused_at)
    # The service records the event on the database's clock (now); the story has it earlier.
    JobEvent.objects.filter(job_id=paused.id, kind=JobEventKind.PAUSED).update(at=paused_at)
    missed = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    run = _runs(job, now)
    # As the engine would have left it after the last of those runs.
    last = now.replace(second=0, microsecond=0) - MINUTE
    Job.objects.filter(id=job.id).update(last_fire_at=last, next_fire_at=last + 2 * MINUTE)
    return Seeded(job=job, run=run, paused=paused, paused_at=paused_at, missed_firing=missed)


def tenants() -> list[Tenant]:
    return list(Tenant.objects.order_by("name"))
