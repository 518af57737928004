"""explain_firing: why a job fired, fired late or did not fire at an instant.

The queries live here; the decision is jobs.explain_rules.explain (pure). Every read is by
the job's own keys (its run at the instant by the unique firing key, its events and reasons
by job), so an explanation costs a handful of index lookups however large the tables are.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

from beat_engine.schedules import ScheduleKind, ScheduleSpec
from jobs.explain_rules import EventFact, Explanation, Facts, ReasonFact, RunFact, explain
from jobs.models import Job, JobRun
from jobs.models_reasons import DecisionReason, JobEvent, JobEventKind
from jobs.run_ids import run_id_ceil, run_id_floor
from jobs.services.jobs import schedule_spec

_STATUS_EVENTS = (JobEventKind.PAUSED, JobEventKind.RESUMED, JobEventKind.CANCELLED)


def explain_firing(job: Job, at: datetime, *, now: datetime) -> Explanation:
    """``at`` must be timezone-aware; ``now`` is the database's clock."""
    if at.utcoffset() is None:
        raise ValueError("at must be timezone-aware")
    at = at.astimezone(UTC)
    return explain(firing_facts(job, at), now=now)


def firing_facts(job: Job, at: datetime) -> Facts:
    events = JobEvent.objects.filter(job_id=job.id)
    before = events.filter(kind__in=_STATUS_EVENTS, at__lte=at).order_by("-at", "-id").first()
    after = events.filter(kind__in=_STATUS_EVENTS, at__gt=at).order_by("at", "id").first()
    edit = events.filter(kind=JobEventKind.UPDATED, at__gt=at).order_by("at", "id").first()
    # The id range of the firing's millisecond prunes the lookup to its day partition.
    run = JobRun.objects.filter(
        job_id=job.id, scheduled_for=at, id__gte=run_id_floor(at), id__lte=run_id_ceil(at)
    ).first()
    reasons = DecisionReason.objects.filter(job_id=job.id, first_at__lte=at, last_at__gte=at)
    return Facts(
        at=at,
        spec=_spec_at(job, edit),
        job_status=job.status,
        job_created_at=job.created_at,
        job_next_fire_at=job.next_fire_at,
        run=_run_fact(run) if run is not None else None,
        event_before=EventFact(before.kind, before.at) if before is not None else None,
        event_after=EventFact(after.kind, after.at) if after is not None else None,
        edited_after=edit.at if edit is not None else None,
        reasons=tuple(
            ReasonFact(
                kind=r.kind,
                first_at=r.first_at,
                last_at=r.last_at,
                count=r.count,
                recorded_at=r.recorded_at,
                updated_at=r.updated_at,
                detail=r.detail,
            )
            for r in reasons.order_by("first_at", "id")[:10]
        ),
        late_after=timedelta(seconds=settings.SCHEDULER["LATE_AFTER_S"]),
    )


def _spec_at(job: Job, edit: JobEvent | None) -> ScheduleSpec | None:
    """The schedule in force at the instant: the one the first later edit replaced, if any."""
    if edit is None or not edit.detail:
        return None if job.kind == "dependent" else schedule_spec(job)
    old = edit.detail
    zone = str(old.get("timezone") or "UTC")
    kind = old.get("kind")
    if kind == ScheduleKind.CRON and old.get("cron"):
        return ScheduleSpec(kind=ScheduleKind.CRON, cron=str(old["cron"]), timezone=zone)
    if kind == ScheduleKind.INTERVAL and old.get("interval_seconds") and old.get("anchor_at"):
        return ScheduleSpec(
            kind=ScheduleKind.INTERVAL,
            interval=timedelta(seconds=int(old["interval_seconds"])),
            anchor=datetime.fromisoformat(str(old["anchor_at"])),
            timezone=zone,
        )
    if kind == ScheduleKind.ONCE and old.get("run_at"):
        return ScheduleSpec(
            kind=ScheduleKind.ONCE, run_at=datetime.fromisoformat(str(old["run_at"])), timezone=zone
        )
    return None


def _run_fact(run: JobRun) -> RunFact:
    return RunFact(
        id=str(run.id),
        state=run.state,
        trigger=run.trigger,
        scheduled_for=run.scheduled_for,
        attempt=run.attempt,
        lateness=run.lateness,
        start_lag=run.start_lag,
        published_at=run.published_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        last_error=run.last_error,
    )
