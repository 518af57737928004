"""Job services: create, update, pause, resume, cancel and trigger now."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from beat_engine.backoff import RetryPolicy
from beat_engine.partitions import partition_for
from beat_engine.schedules import ScheduleKind, ScheduleSpec, next_fire_after
from jobs import validation
from jobs.errors import HasDependents, InvalidInput, InvalidTransition, VersionConflict
from jobs.models import (
    CatchUpPolicyChoice,
    ConcurrencyPolicy,
    Job,
    JobKind,
    JobRun,
    JobSource,
    JobStatus,
    RunTrigger,
    Tenant,
    TriggerRule,
)
from jobs.models_reasons import JobEventKind
from jobs.notify import notify_job_changed, notify_timers_due
from jobs.services import dag_handoff, dependencies, running_limits
from jobs.services.dedup import dedup_key_for
from jobs.services.job_events import job_event_record, job_schedule_fields
from jobs.services.runs import runs_cancel_of_job
from jobs.services.target_limit_config import validate_job_rate_limit
from jobs.states import IN_FLIGHT_STATES, RunState


@dataclass(frozen=True)
class JobInput:
    """Everything a caller may set on a job; the API, admin and decorators all build one."""

    name: str
    target_kind: str
    cron: str | None = None
    interval: timedelta | None = None
    run_at: datetime | None = None
    anchor_at: datetime | None = None
    timezone: str = "UTC"
    target_name: str = ""
    target_url: str = ""
    target_headers: dict[str, str] = field(default_factory=dict)
    payload: Any = field(default_factory=dict)
    description: str = ""
    queue: str = "scheduler"
    priority: int = 5
    max_attempts: int = 3
    retry_base_delay: timedelta = timedelta(seconds=10)
    retry_max_delay: timedelta = timedelta(minutes=10)
    retry_jitter: bool = True
    retry_on_client_error: bool = False
    timeout: timedelta = timedelta(minutes=5)
    concurrency_policy: str = ConcurrencyPolicy.ALLOW
    catchup_policy: str = CatchUpPolicyChoice.SKIP
    catchup_limit: int = 100
    starting_deadline: timedelta | None = None
    jitter_window: timedelta = timedelta(0)
    critical: bool = False
    source: str = JobSource.API
    # Parent jobs (docs/dags.md): with any, the job is dependent and has no schedule of its own.
    depends_on: list[uuid.UUID] | None = None
    trigger_rule: str = TriggerRule.ALL_SUCCESS
    # Runs of this job running at once (docs/limits.md, "Running concurrency"); None: no limit.
    max_running_runs: int | None = None
    # Per-target rate limit (docs/limits.md): the bucket's group ('' for the HTTP host), and a
    # rate and burst of the job's own (None: its tenant's limit for the target, if any).
    target_group: str = ""
    target_rate: float | None = None
    target_burst: int | None = None


SCHEDULE_FIELDS = ("cron", "interval", "run_at")


def schedule_spec(job: Job) -> ScheduleSpec:
    """The pure schedule of a stored job."""
    if job.kind == JobKind.CRON:
        return ScheduleSpec(kind=ScheduleKind.CRON, cron=job.cron_expression, timezone=job.timezone)
    if job.kind == JobKind.INTERVAL:
        assert job.interval_seconds is not None
        return ScheduleSpec(
            kind=ScheduleKind.INTERVAL,
            interval=timedelta(seconds=job.interval_seconds),
            anchor=job.anchor_at,
            timezone=job.timezone,
        )
    return ScheduleSpec(kind=ScheduleKind.ONCE, run_at=job.run_at, timezone=job.timezone)


def _interval_seconds(data: JobInput) -> int | None:
    return int(data.interval.total_seconds()) if data.interval is not None else None


def _spec_from_input(
    data: JobInput, *, now: datetime, check_run_at: bool = True
) -> tuple[str, ScheduleSpec | None]:
    given = [name for name in SCHEDULE_FIELDS if getattr(data, name) is not None]
    if data.depends_on:
        dependencies.normalize_parents(data.depends_on)
        if given:
            # The API names the cron field "schedule"; the others keep their names.
            field = "schedule" if given[0] == "cron" else given[0]
            raise InvalidInput(
                field,
                "not allowed with depends_on: a job with parents runs at its roots' times",
            )
        validation.validate_timezone(data.timezone)
        return JobKind.DEPENDENT, None
    if len(given) != 1:
        which = "none" if not given else " and ".join(given)
        raise InvalidInput(
            "schedule", f"give exactly one of schedule (cron), interval or run_at; got {which}"
        )
    validation.validate_timezone(data.timezone)
    if data.cron is not None:
        spec = ScheduleSpec(kind=ScheduleKind.CRON, cron=data.cron, timezone=data.timezone)
        kind = JobKind.CRON
    elif data.interval is not None:
        spec = ScheduleSpec(
            kind=ScheduleKind.INTERVAL,
            interval=data.interval,
            anchor=data.anchor_at or now,
            timezone=data.timezone,
        )
        kind = JobKind.INTERVAL
    else:
        assert data.run_at is not None
        if check_run_at:
            validation.validate_run_at(data.run_at, now=now)
        spec = ScheduleSpec(kind=ScheduleKind.ONCE, run_at=data.run_at, timezone=data.timezone)
        kind = JobKind.ONCE
    validation.validate_schedule(spec, now=now)
    return kind, spec


def _validate_input(data: JobInput) -> None:
    if data.interval is not None and data.jitter_window >= data.interval:
        # A window as long as the interval would let one firing overtake the next.
        raise InvalidInput("jitter", "must be shorter than the interval")
    validation.validate_name(data.name)
    validation.validate_target(
        data.target_kind, data.target_name, data.target_url, data.target_headers
    )
    validation.validate_payload(data.payload)
    validation.validate_queue(data.queue)
    if data.concurrency_policy not in ConcurrencyPolicy.values:
        raise InvalidInput(
            "concurrency_policy", f"must be one of {', '.join(ConcurrencyPolicy.values)}"
        )
    if data.trigger_rule not in TriggerRule.values:
        raise InvalidInput("trigger_rule", f"must be one of {', '.join(TriggerRule.values)}")
    validation.validate_running_limit("max_running_runs", data.max_running_runs)
    validate_job_rate_limit(data.target_group, data.target_rate, data.target_burst)
    if data.catchup_policy not in CatchUpPolicyChoice.values:
        raise InvalidInput(
            "catchup.policy", f"must be one of {', '.join(CatchUpPolicyChoice.values)}"
        )
    validation.validate_policies(
        retry=RetryPolicy(
            max_attempts=data.max_attempts,
            base_delay=data.retry_base_delay,
            max_delay=data.retry_max_delay,
            jitter=data.retry_jitter,
        ),
        timeout=data.timeout,
        jitter_window=data.jitter_window,
        priority=data.priority,
        catchup_limit=data.catchup_limit,
        starting_deadline=data.starting_deadline,
    )


def _first_fire(kind: str, spec: ScheduleSpec, *, now: datetime) -> datetime:
    if kind == JobKind.ONCE:
        assert spec.run_at is not None
        # A run_at within the grace window in the past fires at once, not never.
        return spec.run_at
    fire = next_fire_after(spec, now)
    if fire is None:
        raise InvalidInput("schedule", "never fires after now")
    return fire


def _apply_input(job: Job, data: JobInput, kind: str, spec: ScheduleSpec | None) -> None:
    job.name = validation.validate_name(data.name)
    job.description = data.description
    job.source = data.source
    job.kind = kind
    job.cron_expression = data.cron or ""
    job.interval_seconds = _interval_seconds(data)
    job.anchor_at = spec.anchor if spec is not None and kind == JobKind.INTERVAL else None
    job.run_at = data.run_at
    job.timezone = data.timezone
    job.target_kind = data.target_kind
    job.target_name = data.target_name
    job.target_url = data.target_url
    job.target_headers = data.target_headers
    job.payload = data.payload
    job.queue = data.queue
    job.priority = data.priority
    job.max_attempts = data.max_attempts
    job.retry_base_delay = data.retry_base_delay
    job.retry_max_delay = data.retry_max_delay
    job.retry_jitter = data.retry_jitter
    job.retry_on_client_error = data.retry_on_client_error
    job.timeout = data.timeout
    job.concurrency_policy = data.concurrency_policy
    job.catchup_policy = data.catchup_policy
    job.catchup_limit = data.catchup_limit
    job.starting_deadline = data.starting_deadline
    job.jitter_window = data.jitter_window
    job.critical = data.critical
    job.trigger_rule = data.trigger_rule
    job.max_running_runs = data.max_running_runs
    job.target_group = validate_job_rate_limit(
        data.target_group, data.target_rate, data.target_burst
    )
    job.target_rate = data.target_rate
    job.target_burst = data.target_burst


def _save_new(job: Job) -> None:
    try:
        with transaction.atomic():
            job.save(force_insert=True)
    except IntegrityError as exc:
        if "job_unique_live_name_per_tenant" in str(exc):
            raise InvalidInput("name", f"a job named {job.name!r} already exists") from None
        raise


def job_build(*, tenant: Tenant, data: JobInput, now: datetime) -> Job:
    """A validated, unsaved active job; raises InvalidInput on bad input (bulk create uses it)."""
    if data.interval is not None and data.interval < timedelta(seconds=1):
        raise InvalidInput("interval", "must be at least 1 second")
    kind, spec = _spec_from_input(data, now=now)
    _validate_input(data)
    job_id = uuid.uuid4()
    job = Job(
        id=job_id,
        tenant=tenant,
        partition=partition_for(job_id, settings.SCHEDULER["PARTITIONS"]),
        status=JobStatus.ACTIVE,
        created_at=now,
        updated_at=now,
    )
    _apply_input(job, data, kind, spec)
    # A dependent job never fires on its own: the engine's claim reads only jobs due.
    job.next_fire_at = _first_fire(kind, spec, now=now) if spec is not None else None
    return job


@transaction.atomic
def job_create(
    *,
    tenant: Tenant,
    data: JobInput,
    now: datetime,
    idempotency_key: str = "",
    request_hash: str = "",
) -> Job:
    """Validate and store a new active job; raises InvalidInput and writes nothing on bad input.

    With ``idempotency_key`` a second create under the same key violates
    job_unique_idempotency_key; jobs.services.job_intake turns that into "return the original".
    """
    job = job_build(tenant=tenant, data=data, now=now)
    job.idempotency_key = idempotency_key
    job.request_hash = request_hash
    if data.depends_on:
        dependencies.lock_tenant_dag(tenant.id)
    _save_new(job)
    if data.depends_on:
        dependencies.edges_create_for_new(job, data.depends_on, now=now)
    notify_job_changed(job_id=str(job.id), partition=job.partition)
    return job


def job_input_from(job: Job) -> JobInput:
    """The input that would recreate ``job``; updates start from it and replace fields."""
    return JobInput(
        name=job.name,
        description=job.description,
        source=job.source,
        cron=job.cron_expression or None,
        interval=(
            timedelta(seconds=job.interval_seconds) if job.interval_seconds is not None else None
        ),
        run_at=job.run_at,
        anchor_at=job.anchor_at,
        timezone=job.timezone,
        target_kind=job.target_kind,
        target_name=job.target_name,
        target_url=job.target_url,
        target_headers=dict(job.target_headers),
        payload=job.payload,
        queue=job.queue,
        priority=job.priority,
        max_attempts=job.max_attempts,
        retry_base_delay=job.retry_base_delay,
        retry_max_delay=job.retry_max_delay,
        retry_jitter=job.retry_jitter,
        retry_on_client_error=job.retry_on_client_error,
        timeout=job.timeout,
        concurrency_policy=job.concurrency_policy,
        catchup_policy=job.catchup_policy,
        catchup_limit=job.catchup_limit,
        starting_deadline=job.starting_deadline,
        jitter_window=job.jitter_window,
        critical=job.critical,
        depends_on=dependencies.parent_ids_of(job.id) or None,
        trigger_rule=job.trigger_rule,
        max_running_runs=job.max_running_runs,
        target_group=job.target_group,
        target_rate=job.target_rate,
        target_burst=job.target_burst,
    )


def _lock(job_id: uuid.UUID, expected_version: int | None) -> Job:
    # FOR NO KEY UPDATE, not FOR UPDATE: a worker's outcome inserts rows whose foreign keys take
    # FOR KEY SHARE on this job row while it holds its run; FOR UPDATE would make it wait for
    # us while we wait for its run (one lock order, docs/architecture.md, Invariants).
    job = Job.objects.select_for_update(no_key=True).get(id=job_id)
    if expected_version is not None and job.version != expected_version:
        raise VersionConflict(expected=expected_version, actual=job.version)
    return job


# Runs claimed ahead of an instant still to come (docs/engine.md, "Claim ahead"), taken back
# with the job row held (the job row first, then its runs: one lock order, docs/architecture.md,
# Invariants). A run a worker started is running by then, and one whose instant has come is due;
# neither matches, and a message already pushed for a withdrawn run finds nothing to start.
_WITHDRAW_AHEAD_SQL = f"""
DELETE FROM jobs_jobrun
 WHERE job_id = %s AND state = '{RunState.QUEUED.value}' AND attempt = 1
   AND published_at IS NULL AND due_at > %s
RETURNING scheduled_for
"""

_LAST_KEPT_FIRING_SQL = """
SELECT max(scheduled_for) FROM jobs_jobrun WHERE job_id = %s AND scheduled_for < %s
"""


def _withdraw_claimed_ahead(job: Job, *, now: datetime) -> datetime | None:
    """Undo the claims ahead of ``job`` (an edit or a pause between a claim ahead and its
    instant): returns the earliest firing withdrawn, for the job to fire again from there as
    edited, or not at all while paused."""
    with connection.cursor() as cursor:
        cursor.execute(_WITHDRAW_AHEAD_SQL, [job.id, now])
        earliest = min((row[0] for row in cursor.fetchall()), default=None)
        if earliest is not None and job.last_fire_at is not None and job.last_fire_at >= earliest:
            # The claim ahead recorded its firings as the job's last; withdrawn, they never
            # happened, so the last firing is the latest one still on record before them.
            cursor.execute(_LAST_KEPT_FIRING_SQL, [job.id, earliest])
            job.last_fire_at = cursor.fetchone()[0]
    return earliest


def _bump(job: Job, *, now: datetime) -> None:
    job.version += 1
    job.updated_at = now
    job.save()
    notify_job_changed(job_id=str(job.id), partition=job.partition)


@transaction.atomic
def job_update(
    *, job_id: uuid.UUID, data: JobInput, expected_version: int | None, now: datetime
) -> Job:
    """Replace the job's definition; a stale ``expected_version`` raises VersionConflict.

    Parents and schedule both decide which logical times a job's DAG shares, so every update
    takes the tenant's DAG lock first, before the row lock (one lock order,
    docs/architecture.md, Invariants), and checks the graph again inside the transaction.
    """
    dependencies.lock_dag_of_job(job_id)
    job = _lock(job_id, expected_version)
    if job.status in (JobStatus.CANCELLED, JobStatus.COMPLETED):
        raise InvalidTransition(f"a {job.status} job cannot be changed")
    schedule_changed = (
        data.cron != (job.cron_expression or None)
        or data.timezone != job.timezone
        or data.run_at != job.run_at
        or _interval_seconds(data) != job.interval_seconds
        or (data.anchor_at is not None and data.anchor_at != job.anchor_at)
    )
    if data.interval is not None and data.interval < timedelta(seconds=1):
        raise InvalidInput("interval", "must be at least 1 second")
    # An unchanged run_at may lie in the past by now; only a new one must be in the future.
    kind, spec = _spec_from_input(data, now=now, check_run_at=data.run_at != job.run_at)
    _validate_input(data)
    previous = job_schedule_fields(job)
    previous_limit = job.max_running_runs
    _apply_input(job, data, kind, spec)
    withdrawn = _withdraw_claimed_ahead(job, now=now)
    if schedule_changed:
        job.next_fire_at = _first_fire(kind, spec, now=now) if spec is not None else None
    elif withdrawn is not None:
        # Claimed again, as edited (its queue, priority and target as they are now).
        job.next_fire_at = withdrawn
    _bump(job, now=now)
    edges_changed = dependencies.edges_set(job, data.depends_on or [], now=now)
    if schedule_changed and not edges_changed:
        # A root's new schedule must still be the one of every other root of its descendants.
        dependencies.check_roots_agree([job.id], field="schedule", descendants=True)
    job_event_record(job, JobEventKind.UPDATED, detail=previous)
    if job.max_running_runs != previous_limit:
        # Raised or removed: the runs it parked that now fit start without waiting for an end.
        running_limits.release_free_slots(
            running_limits.Hold.JOB, job.id, job.max_running_runs, now=now
        )
    return job


@transaction.atomic
def job_pause(*, job_id: uuid.UUID, expected_version: int | None = None, now: datetime) -> Job:
    job = _lock(job_id, expected_version)
    if job.status == JobStatus.PAUSED:
        return job
    if job.status != JobStatus.ACTIVE:
        raise InvalidTransition(f"only an active job can be paused; this one is {job.status}")
    withdrawn = _withdraw_claimed_ahead(job, now=now)
    if withdrawn is not None:
        # Resuming fires it from there, by the job's catch-up policy.
        job.next_fire_at = withdrawn
    job.status = JobStatus.PAUSED
    _bump(job, now=now)
    job_event_record(job, JobEventKind.PAUSED)
    return job


@transaction.atomic
def job_resume(*, job_id: uuid.UUID, expected_version: int | None = None, now: datetime) -> Job:
    """Resume a paused job; firings missed while paused follow its catch-up policy."""
    job = _lock(job_id, expected_version)
    if job.status == JobStatus.ACTIVE:
        return job
    if job.status != JobStatus.PAUSED:
        raise InvalidTransition(f"only a paused job can be resumed; this one is {job.status}")
    if job.next_fire_at is None and job.kind != JobKind.DEPENDENT:
        job.next_fire_at = _first_fire(job.kind, schedule_spec(job), now=now)
    job.status = JobStatus.ACTIVE
    job.status_reason = ""
    _bump(job, now=now)
    job_event_record(job, JobEventKind.RESUMED)
    return job


def _cancel_downstream(job: Job, *, cascade: bool, now: datetime) -> None:
    """Refuse to strand live dependents, or (cascade) cancel every live job below ``job``.

    The caller holds the tenant's DAG lock, so no edge appears meanwhile, and the job's row.
    The rows below are locked in id order, all before any run (one lock order,
    docs/architecture.md, Invariants).
    """
    live = [
        child for child in dependencies.dependents_of(job.id) if child.status != JobStatus.CANCELLED
    ]
    if not live:
        return
    if not cascade:
        raise HasDependents([(str(child.id), child.name) for child in live])
    below = sorted(dependencies.descendant_ids_of(job.id))
    locked = list(
        Job.objects.select_for_update(no_key=True)
        .filter(id__in=below)
        .exclude(status=JobStatus.CANCELLED)
        .order_by("id")
    )
    for child in locked:
        child.status = JobStatus.CANCELLED
        child.status_reason = f"cancelled with its ancestor {job.name!r} ({job.id})"
        child.next_fire_at = None
        _bump(child, now=now)
        job_event_record(child, JobEventKind.CANCELLED)
    # Every job below is cancelled before any of their runs is, so a run's cancel hands
    # nothing down to a job that is being cancelled too.
    for child in locked:
        runs_cancel_of_job(job_id=child.id, now=now)


@transaction.atomic
def job_cancel(
    *, job_id: uuid.UUID, expected_version: int | None = None, now: datetime, cascade: bool = False
) -> Job:
    """Stop all future firings; waiting runs are cancelled and running ones asked to stop.

    The tenant's DAG lock first, then the job row, then its runs (one lock order,
    docs/architecture.md, Invariants); a claim racing this sees the new version and inserts
    nothing. A job with live dependents raises HasDependents, unless ``cascade``, which cancels
    them and everything below them too, in the same transaction.
    """
    dependencies.lock_dag_of_job(job_id)
    job = _lock(job_id, expected_version)
    if job.status == JobStatus.CANCELLED:
        return job
    _cancel_downstream(job, cascade=cascade, now=now)
    job.status = JobStatus.CANCELLED
    job.next_fire_at = None
    runs_cancel_of_job(job_id=job.id, now=now)
    _bump(job, now=now)
    job_event_record(job, JobEventKind.CANCELLED)
    return job


@transaction.atomic
def job_trigger_now(*, job_id: uuid.UUID, now: datetime) -> JobRun:
    """Queue one run outside the schedule; the engine dispatches it like any due firing."""
    job = Job.objects.select_for_update(no_key=True).get(id=job_id)
    if job.status in (JobStatus.CANCELLED,):
        raise InvalidTransition("a cancelled job cannot be triggered")
    dag_handoff.refuse_standalone_run(job, verb="trigger")
    run = JobRun.objects.create(
        job=job,
        tenant_id=job.tenant_id,
        partition=job.partition,
        scheduled_for=now,
        trigger=RunTrigger.MANUAL,
        state=RunState.PENDING,
        due_at=now,
        dedup_key=dedup_key_for(job.id, now),
        created_at=now,
    )
    # Queued by the owner's timers at once, not at its next poll.
    notify_timers_due([job.partition])
    return run


def job_has_run_in_flight(job: Job) -> bool:
    return JobRun.objects.filter(job=job, state__in=IN_FLIGHT_STATES).exists()
