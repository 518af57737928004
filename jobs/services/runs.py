"""Run state changes, each a compare-and-set on (state, attempt) that the database decides."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from jobs.models import DeadLetter, JobRun, RunAttempt
from jobs.services.dedup import dedup_ttl
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


@dataclass(frozen=True)
class Heartbeat:
    # False once the attempt is no longer current (reaped, finished): the worker is a zombie.
    alive: bool
    cancel_requested: bool


def run_lease() -> timedelta:
    return timedelta(seconds=settings.SCHEDULER["RUN_LEASE_S"])


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


# The outcome in one statement: the CAS on (id, attempt, running) decides, and only a row it
# moved gets its attempt closed (and, on success, the firing's key recorded), so they commit
# together with no explicit transaction and one round trip.
_FINISH_SQL = """
WITH finished AS (
    UPDATE jobs_jobrun SET {assignments}
     WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(running)s
    RETURNING id, attempt, job_id, tenant_id, dedup_key
), closed AS (
    UPDATE jobs_runattempt AS a
       SET outcome = %(outcome)s, error = %(last_error)s, finished_at = %(now)s
      FROM finished AS f
     WHERE a.run_id = f.id AND a.attempt = f.attempt
){keyed}
SELECT job_id, tenant_id FROM finished
"""

# dedup_record's upsert, fed by the CAS: a key the callable already recorded with its effect
# stays as it is; only an expired one is replaced.
_RECORD_KEY_CTE = """, keyed AS (
    INSERT INTO jobs_dedupkey (key, tenant_id, job_id, run_id, outcome, created_at, expires_at)
    SELECT dedup_key, tenant_id, job_id, id, 'succeeded', %(now)s, %(key_expires_at)s
      FROM finished
    ON CONFLICT (key) DO UPDATE
       SET tenant_id = EXCLUDED.tenant_id, job_id = EXCLUDED.job_id,
           run_id = EXCLUDED.run_id, outcome = EXCLUDED.outcome,
           created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE jobs_dedupkey.expires_at <= EXCLUDED.created_at
)
"""

# Columns an outcome may set besides state, lease and error; names come from here, never input.
_FINISH_COLUMNS = frozenset({"finished_at", "due_at", "result"})


def _finish(
    *,
    run_id: uuid.UUID,
    attempt: int,
    to: RunState,
    outcome: str,
    error: str,
    now: datetime,
    record_key: bool = False,
    **fields: Any,
) -> tuple[uuid.UUID, int] | None:
    """The run's (job_id, tenant_id) when the outcome was accepted, None when refused."""
    assert fields.keys() <= _FINISH_COLUMNS, fields.keys()
    if "result" in fields:
        fields["result"] = None if fields["result"] is None else Jsonb(fields["result"])
    values = {"state": to.value, "lease_until": None, "last_error": error[:ERROR_MAX_CHARS]}
    values.update(fields)
    sql = _FINISH_SQL.format(
        assignments=", ".join(f"{column} = %({column})s" for column in values),
        keyed=_RECORD_KEY_CTE if record_key else "",
    )
    params = {
        **values,
        "run_id": run_id,
        "attempt": attempt,
        "running": RunState.RUNNING.value,
        "outcome": outcome,
        "now": now,
        "key_expires_at": now + dedup_ttl(),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        _note_refused(run_id=run_id, attempt=attempt, outcome=outcome, error=error, now=now)
        return None
    return row[0], row[1]


@transaction.atomic
def _note_refused(
    *, run_id: uuid.UUID, attempt: int, outcome: str, error: str, now: datetime
) -> None:
    # Invariant 3: a zombie may note on its own row when it ended, never the run's outcome; the
    # reaper's 'lost' verdict stays.
    attempts = RunAttempt.objects.filter(run_id=run_id, attempt=attempt)
    note = f"late {outcome} refused: attempt {attempt} is no longer current. {error}"
    attempts.filter(finished_at__isnull=True).update(finished_at=now, error=note[:ERROR_MAX_CHARS])
    attempts.filter(outcome="").update(outcome=AttemptOutcome.LOST)


def run_succeed(
    *,
    run_id: uuid.UUID,
    attempt: int,
    now: datetime,
    result: Any = None,
    record_key: bool = True,
    outcome: str = AttemptOutcome.SUCCEEDED,
) -> bool:
    """Record success of ``attempt``; False (nothing changed) when the attempt is stale.

    With ``record_key`` the firing's key is recorded in the same statement: a run is never
    'succeeded' without its key.
    """
    return (
        _finish(
            run_id=run_id,
            attempt=attempt,
            to=RunState.SUCCEEDED,
            outcome=outcome,
            error="",
            now=now,
            record_key=record_key,
            finished_at=now,
            result=result,
        )
        is not None
    )


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
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.RETRY_WAIT,
        outcome=outcome,
        error=error,
        now=now,
        due_at=due_at,
        result=result,
    )
    return accepted is not None


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
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.FAILED,
        outcome=outcome,
        error=error,
        now=now,
        finished_at=now,
        result=result,
    )
    return accepted is not None


def run_cancelled(*, run_id: uuid.UUID, attempt: int, error: str, now: datetime) -> bool:
    """The running attempt stopped because the run or its job was cancelled; not retried."""
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.CANCELLED,
        outcome=AttemptOutcome.CANCELLED,
        error=error,
        now=now,
        finished_at=now,
    )
    return accepted is not None


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
    if accepted is None:
        return False
    job_id, tenant_id = accepted
    # A replayed run that dies again reuses its row: one DeadLetter per run, latest error.
    DeadLetter.objects.update_or_create(
        run_id=run_id,
        defaults={
            "job_id": job_id,
            "tenant_id": tenant_id,
            "attempts": attempt,
            "last_error": error[:ERROR_MAX_CHARS],
            "moved_at": now,
        },
    )
    transaction.on_commit(
        lambda: dead_letter_announce(
            run_id=run_id, job_id=job_id, attempts=attempt, error=error, now=now
        )
    )
    return True
