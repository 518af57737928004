"""Run state changes, each a compare-and-set on (state, attempt) that the database decides."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from jobs.models import ConcurrencyPolicy, DeadLetter, Job, JobRun, RunAttempt
from jobs.services.dedup import dedup_record
from jobs.states import AttemptOutcome, RunState, sources_of

# Errors are kept for people to read, not as logs: long tracebacks are cut.
ERROR_MAX_CHARS = 4000


def run_transition(
    *,
    run_id: uuid.UUID,
    to: RunState,
    attempt: int | None = None,
    from_states: Iterable[RunState] | None = None,
    **fields: Any,
) -> bool:
    """Move a run to ``to`` only if it is in an allowed source state (and at ``attempt``).

    Returns False when another process got there first or the attempt is stale: a race that
    is expected is an outcome, not an exception. Invariant 3: a zombie's late write carries
    an old attempt number and updates zero rows.
    """
    allowed = sources_of(to)
    states = allowed if from_states is None else allowed & frozenset(from_states)
    query = JobRun.objects.filter(id=run_id, state__in=list(states))
    if attempt is not None:
        query = query.filter(attempt=attempt)
    return query.update(state=to, **fields) == 1


def run_request_cancel(*, run_id: uuid.UUID, now: datetime) -> bool:
    """Cancel a waiting run outright, or ask a running one to stop at its next heartbeat."""
    if run_transition(
        run_id=run_id,
        to=RunState.CANCELLED,
        from_states=[RunState.PENDING, RunState.RETRY_WAIT, RunState.QUEUED],
        finished_at=now,
        due_at=None,
        last_error="cancelled on request",
    ):
        return True
    return (
        JobRun.objects.filter(id=run_id, state=RunState.RUNNING).update(cancel_requested=True) == 1
    )


class StartOutcome(enum.Enum):
    STARTED = "started"
    # Zero rows matched (state, attempt): a duplicate or stale message, dropped by the caller.
    STALE = "stale"
    # The job forbids overlap and another run of it is running: recorded as skipped.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    run: JobRun | None = None


@dataclass(frozen=True)
class Heartbeat:
    # False once the attempt is no longer current (reaped, finished): the worker is a zombie.
    alive: bool
    cancel_requested: bool


def run_lease() -> timedelta:
    return timedelta(seconds=settings.SCHEDULER["RUN_LEASE_S"])


def _apply_concurrency_policy(*, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
    """Enforce forbid/replace for the run about to start; False when it was skipped."""
    row = JobRun.objects.filter(id=run_id).values_list("job_id", "job__concurrency_policy").first()
    if row is None or row[1] == ConcurrencyPolicy.ALLOW:
        return True
    job_id, policy = row
    # Lock the job row so two runs of one job starting at once see each other: without it both
    # could find "nothing running" and overlap under forbid.
    list(Job.objects.select_for_update(no_key=True).filter(id=job_id).values_list("id"))
    others = JobRun.objects.filter(job_id=job_id, state=RunState.RUNNING).exclude(id=run_id)
    if policy == ConcurrencyPolicy.FORBID and others.exists():
        run_transition(
            run_id=run_id,
            to=RunState.SKIPPED,
            attempt=attempt,
            from_states=[RunState.QUEUED],
            finished_at=now,
            last_error="skipped: the previous run of this job is still running (forbid)",
        )
        return False
    if policy == ConcurrencyPolicy.REPLACE:
        # The running attempts stop at their next heartbeat; this run does not wait for them.
        others.update(cancel_requested=True)
    return True


@transaction.atomic
def run_start(*, run_id: uuid.UUID, attempt: int, worker: str, now: datetime) -> StartResult:
    """Compare-and-set queued -> running for exactly this attempt, then open its attempt row."""
    if not _apply_concurrency_policy(run_id=run_id, attempt=attempt, now=now):
        skipped = JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.SKIPPED)
        return StartResult(StartOutcome.SKIPPED if skipped.exists() else StartOutcome.STALE)
    started = run_transition(
        run_id=run_id,
        to=RunState.RUNNING,
        attempt=attempt,
        from_states=[RunState.QUEUED],
        started_at=now,
        heartbeat_at=now,
        lease_until=now + run_lease(),
        worker=worker,
        finished_at=None,
    )
    if not started:
        return StartResult(StartOutcome.STALE)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, queued_at, started_at,
                                         outcome, error)
            SELECT id, attempt, epoch, worker, queued_at, started_at, '', ''
              FROM jobs_jobrun WHERE id = %s
            ON CONFLICT (run_id, attempt) DO UPDATE
               SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at
            """,
            [run_id],
        )
    return StartResult(StartOutcome.STARTED, JobRun.objects.select_related("job").get(id=run_id))


def run_heartbeat(*, run_id: uuid.UUID, attempt: int, now: datetime) -> Heartbeat:
    """Extend the lease of a running attempt and read its cancel flag, in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE jobs_jobrun SET lease_until = %s, heartbeat_at = %s
             WHERE id = %s AND attempt = %s AND state = %s
            RETURNING cancel_requested
            """,
            [now + run_lease(), now, run_id, attempt, RunState.RUNNING.value],
        )
        row = cursor.fetchone()
    if row is None:
        return Heartbeat(alive=False, cancel_requested=True)
    return Heartbeat(alive=True, cancel_requested=bool(row[0]))


def _close_attempt(
    *, run_id: uuid.UUID, attempt: int, accepted: bool, outcome: str, error: str, now: datetime
) -> None:
    """Write the attempt's own row: its outcome when accepted, else only that it ended late."""
    attempts = RunAttempt.objects.filter(run_id=run_id, attempt=attempt)
    if accepted:
        attempts.update(outcome=outcome, error=error[:ERROR_MAX_CHARS], finished_at=now)
        return
    # Invariant 3: a zombie may note on its own row when it ended, never the run's outcome; the
    # reaper's 'lost' verdict stays.
    note = f"late {outcome} refused: attempt {attempt} is no longer current. {error}"
    attempts.filter(finished_at__isnull=True).update(finished_at=now, error=note[:ERROR_MAX_CHARS])
    attempts.filter(outcome="").update(outcome=AttemptOutcome.LOST)


def _finish(
    *,
    run_id: uuid.UUID,
    attempt: int,
    to: RunState,
    outcome: str,
    error: str,
    now: datetime,
    **fields: Any,
) -> bool:
    accepted = run_transition(
        run_id=run_id,
        to=to,
        attempt=attempt,
        from_states=[RunState.RUNNING],
        lease_until=None,
        last_error=error[:ERROR_MAX_CHARS],
        **fields,
    )
    _close_attempt(
        run_id=run_id, attempt=attempt, accepted=accepted, outcome=outcome, error=error, now=now
    )
    return accepted


@transaction.atomic
def run_succeed(
    *,
    run_id: uuid.UUID,
    attempt: int,
    now: datetime,
    result: Any = None,
    record_key: bool = True,
    outcome: str = AttemptOutcome.SUCCEEDED,
) -> bool:
    """Record success of ``attempt``; False (nothing changed) when the attempt is stale."""
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.SUCCEEDED,
        outcome=outcome,
        error="",
        now=now,
        finished_at=now,
        result=result,
    )
    if accepted and record_key:
        run = JobRun.objects.values("dedup_key", "tenant_id", "job_id").get(id=run_id)
        # Same transaction as the state change: a run is never 'succeeded' without its key.
        dedup_record(
            key=run["dedup_key"],
            tenant_id=run["tenant_id"],
            job_id=run["job_id"],
            run_id=run_id,
            now=now,
        )
    return accepted


@transaction.atomic
def run_retry(
    *,
    run_id: uuid.UUID,
    attempt: int,
    due_at: datetime,
    error: str,
    now: datetime,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> bool:
    """Park a failed attempt in retry_wait until ``due_at``; the engine queues attempt + 1.

    The wait lives in the database, never in a broker countdown (RELIABILITY.md, consequence 5).
    """
    return _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.RETRY_WAIT,
        outcome=outcome,
        error=error,
        now=now,
        due_at=due_at,
        result=result,
    )


@transaction.atomic
def run_fail(
    *,
    run_id: uuid.UUID,
    attempt: int,
    error: str,
    now: datetime,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> bool:
    """A permanent failure: retrying cannot fix it, so the run ends as failed."""
    return _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.FAILED,
        outcome=outcome,
        error=error,
        now=now,
        finished_at=now,
        result=result,
    )


@transaction.atomic
def run_cancelled(*, run_id: uuid.UUID, attempt: int, error: str, now: datetime) -> bool:
    """The running attempt stopped because the run or its job was cancelled; not retried."""
    return _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.CANCELLED,
        outcome=AttemptOutcome.CANCELLED,
        error=error,
        now=now,
        finished_at=now,
    )


@transaction.atomic
def run_dead_letter(
    *,
    run_id: uuid.UUID,
    attempt: int,
    error: str,
    now: datetime,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> bool:
    """The last allowed attempt failed: run -> dead, a DeadLetter row, and (after commit) a
    message on the dead-letter queue for whatever alerts."""
    from jobs.services.dead_letters import dead_letter_announce

    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.DEAD,
        outcome=outcome,
        error=error,
        now=now,
        finished_at=now,
        result=result,
    )
    if not accepted:
        return False
    run = JobRun.objects.values("job_id", "tenant_id").get(id=run_id)
    # A replayed run that dies again reuses its row: one DeadLetter per run, latest error.
    DeadLetter.objects.update_or_create(
        run_id=run_id,
        defaults={
            "job_id": run["job_id"],
            "tenant_id": run["tenant_id"],
            "attempts": attempt,
            "last_error": error[:ERROR_MAX_CHARS],
            "moved_at": now,
        },
    )
    transaction.on_commit(
        lambda: dead_letter_announce(
            run_id=run_id, job_id=run["job_id"], attempts=attempt, error=error, now=now
        )
    )
    return True
