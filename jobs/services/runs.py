"""Run state changes, each a compare-and-set on (state, attempt) that the database decides."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import OperationalError, connection, transaction
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from jobs import metrics, own_partition
from jobs.db_failover import retry_on_failover
from jobs.models import DeadLetter, JobRun, RunAttempt
from jobs.notify import notify_runs_cancelled, notify_timers_due
from jobs.services import dag_handoff, running_limits
from jobs.services.dedup import dedup_ttl
from jobs.states import AttemptOutcome, RunState, sources_of

logger = logging.getLogger(__name__)

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
    is expected is an outcome, not an exception. No stale fence (docs/architecture.md,
    Invariants): a zombie's late write carries an old attempt number and updates zero rows.
    """
    allowed = sources_of(to)
    states = allowed if from_states is None else allowed & frozenset(from_states)
    query = JobRun.objects.filter(id=run_id, state__in=list(states))
    if attempt is not None:
        query = query.filter(attempt=attempt)
    return query.update(state=to, **fields) == 1


# Cancel a run in one statement: a waiting run ends cancelled, a running one is flagged for its
# supervisor, and every one keeps the flag, which the reaper, the timers, the start and the
# outcome all honour (cancel is final, docs/architecture.md, Invariants). One statement with
# CASE, not "try waiting, then try running": between two statements a worker's outcome could
# move the run from running to retry_wait and both would miss it. PostgreSQL re-evaluates the
# WHERE on the row's newest version when it waited for a worker's write, so the cancel applies
# to whatever state the run reached. Rows are locked in id order, so two multi-row cancels, or
# a cancel and any other writer that locks runs in id order, cannot deadlock.
_CANCEL_RUNS_SQL = """
UPDATE jobs_jobrun AS r
   SET cancel_requested = true,
       state = CASE WHEN r.state = %(running)s THEN r.state ELSE %(cancelled)s END,
       finished_at = CASE WHEN r.state = %(running)s THEN r.finished_at ELSE %(now)s END,
       due_at = CASE WHEN r.state = %(running)s THEN r.due_at ELSE NULL END,
       last_error = CASE WHEN r.state = %(running)s THEN r.last_error ELSE %(reason)s END
 WHERE r.id IN (SELECT id FROM jobs_jobrun
                 WHERE {match} AND state = ANY(%(states)s)
                 ORDER BY id
                   FOR NO KEY UPDATE)
   AND r.state = ANY(%(states)s)
RETURNING r.id, r.state
"""

# States a cancel acts on: waiting ones end at once, a running one is asked to stop.
_CANCELLABLE = sorted(
    state.value
    for state in (RunState.PENDING, RunState.RETRY_WAIT, RunState.QUEUED, RunState.RUNNING)
)


def _cancel_runs(match: str, value: uuid.UUID, *, now: datetime, reason: str) -> int:
    sql = _CANCEL_RUNS_SQL.format(match=match)
    params: dict[str, Any] = {
        "value": value,
        "now": now,
        "reason": reason,
        "states": _CANCELLABLE,
        "running": RunState.RUNNING.value,
        "cancelled": RunState.CANCELLED.value,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # Running ones are told at once, after commit; their next heartbeat reads the flag anyway.
    notify_runs_cancelled([str(run_id) for run_id, state in rows if state == RunState.RUNNING])
    return len(rows)


def run_request_cancel(*, run_id: uuid.UUID, now: datetime) -> bool:
    """Cancel a waiting run outright, or ask a running one to stop: its worker is told at once
    and its supervisor reads the flag at every heartbeat. False when the run had already ended.
    """
    return bool(_cancel_runs("id = %(value)s", run_id, now=now, reason="cancelled on request"))


def runs_cancel_of_job(*, job_id: uuid.UUID, now: datetime) -> int:
    """Every unfinished run of a job being cancelled, as ``run_request_cancel`` does for one.

    The caller holds the job row (FOR NO KEY UPDATE): the job row first, then its runs (one
    lock order, docs/architecture.md, Invariants).
    """
    return _cancel_runs("job_id = %(value)s", job_id, now=now, reason="job cancelled")


@dataclass(frozen=True)
class Heartbeat:
    # False once the attempt is no longer current (reaped, finished): the worker is a zombie.
    alive: bool
    cancel_requested: bool


def run_lease() -> timedelta:
    return timedelta(seconds=settings.SCHEDULER["RUN_LEASE_S"])


# Prepared, and addressed to the run's day partition, as the start and the outcome are
# (jobs/prepared.py, jobs/own_partition.py): every running attempt sends one every HEARTBEAT_S.
_HEARTBEAT_SQL = """
UPDATE {runs} SET lease_until = %(lease_until)s, heartbeat_at = %(now)s
 WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(running)s
RETURNING cancel_requested
"""


def run_heartbeat(*, run_id: uuid.UUID, attempt: int, now: datetime) -> Heartbeat:
    """Extend the lease of a running attempt and read its cancel flag, in one round trip."""
    params = {
        "lease_until": now + run_lease(),
        "now": now,
        "run_id": run_id,
        "attempt": attempt,
        "running": RunState.RUNNING.value,
    }
    row = own_partition.fetch_one(_HEARTBEAT_SQL, params, run_id=run_id, now=now)
    if row is None:
        return Heartbeat(alive=False, cancel_requested=True)
    return Heartbeat(alive=True, cancel_requested=bool(row[0]))


# The outcome in one statement: the CAS on (id, attempt, running) decides, and only a row it
# moved gets its attempt closed (and, on success, the firing's key recorded), so they commit
# together with no explicit transaction and one round trip. {runs} and {attempts}: the run's day
# partitions or the parent tables (jobs/own_partition.py).
_FINISH_SQL = """
WITH finished AS (
    UPDATE {runs} SET {assignments}
     WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(running)s
    RETURNING id, attempt, job_id, tenant_id, dedup_key, state
), closed AS (
    -- The run id once more on its own: the attempts are partitioned by it too, and only a value
    -- known before execution (a constant, or the prepared statement's parameter) lets
    -- PostgreSQL prune to the run's own partition instead of probing every day's.
    UPDATE {attempts} AS a
       SET outcome = %(outcome)s, error = %(last_error)s, finished_at = %(now)s
      FROM finished AS f
     WHERE a.run_id = %(run_id)s AND a.run_id = f.id AND a.attempt = f.attempt
){keyed}{released}
SELECT job_id, tenant_id, state, {child_partitions}, {released_partitions} FROM finished
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

# Cancel is final (docs/architecture.md, Invariants): an attempt of a run whose cancel was
# requested that ends in failure ends the run cancelled, never in retry_wait (the timer would
# start another attempt) nor dead (replay is for failures, not for what a user stopped). Decided
# on the row in the same statement, so a cancel that commits just before the outcome counts.
_DIVERTED = {
    "state": "CASE WHEN cancel_requested THEN %(cancelled)s ELSE %(state)s END",
    "due_at": "CASE WHEN cancel_requested THEN NULL ELSE {due_at} END",
    "finished_at": "CASE WHEN cancel_requested THEN %(now)s ELSE {finished_at} END",
    "last_error": (
        "CASE WHEN cancel_requested THEN %(cancel_note)s || %(last_error)s ELSE %(last_error)s END"
    ),
}
_DIVERTIBLE = frozenset({RunState.RETRY_WAIT, RunState.FAILED, RunState.DEAD})

# Columns an outcome may set besides state, lease and error; names come from here, never input.
_FINISH_COLUMNS = frozenset({"finished_at", "due_at", "result"})

# A worker writes its attempt's outcome once: losing that write to a deadlock or serialization
# failure would leave the run running until its lease expired and then run it again (one lock
# order, docs/architecture.md, Invariants). Each try is a new statement on the rows' newest
# versions, so a retry can only be refused as stale, never applied twice.
OUTCOME_WRITE_TRIES = 5
_RETRYABLE_ERRORS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)

P = ParamSpec("P")
R = TypeVar("R")


def _retried(write: Callable[P, R]) -> Callable[P, R]:
    """Also repeated, on a new connection, while the primary is lost (jobs/db_failover.py):
    when the connection died after the server committed, the repeat matches no running row at
    this attempt and is refused as stale, so an outcome is never applied twice."""

    @functools.wraps(write)
    def retrying(*args: P.args, **kwargs: P.kwargs) -> R:
        return retry_on_failover(_retried_on_conflict, *args, **kwargs)

    @functools.wraps(write)
    def _retried_on_conflict(*args: P.args, **kwargs: P.kwargs) -> R:
        for tries_left in range(OUTCOME_WRITE_TRIES - 1, -1, -1):
            try:
                return write(*args, **kwargs)
            except OperationalError as exc:
                # Inside a caller's transaction the whole transaction is lost: only its owner
                # can start it again.
                if (
                    tries_left == 0
                    or connection.in_atomic_block
                    or not isinstance(exc.__cause__, _RETRYABLE_ERRORS)
                ):
                    raise
                logger.warning(
                    "execution.outcome.retried",
                    extra={"write": write.__name__, "error": type(exc.__cause__).__name__},
                )
                metrics.OUTCOME_WRITE_RETRIES.inc()
        raise AssertionError("unreachable")

    return retrying


@dataclass(frozen=True)
class _Finished:
    job_id: uuid.UUID
    tenant_id: int
    # The state the run ended in: ``to``, or cancelled when its cancel had been requested.
    state: RunState


def _assignments(values: dict[str, Any], divert: bool) -> str:
    if not divert:
        return ", ".join(f"{column} = %({column})s" for column in values)
    kept = {column: f"%({column})s" for column in values}
    kept.setdefault("due_at", "due_at")
    kept.setdefault("finished_at", "finished_at")
    parts = []
    for column, value in kept.items():
        expression = _DIVERTED.get(column, value).format(**kept)
        parts.append(f"{column} = {expression}")
    return ", ".join(parts)


def _finish(
    *,
    run_id: uuid.UUID,
    attempt: int,
    to: RunState,
    outcome: str,
    error: str,
    now: datetime,
    record_key: bool = False,
    release_slot: bool = True,
    **fields: Any,
) -> _Finished | None:
    """How the run ended when the outcome was accepted, None when refused."""
    assert fields.keys() <= _FINISH_COLUMNS, fields.keys()
    if "result" in fields:
        fields["result"] = None if fields["result"] is None else Jsonb(fields["result"])
    values = {"state": to.value, "lease_until": None, "last_error": error[:ERROR_MAX_CHARS]}
    values.update(fields)
    sql = _FINISH_SQL.format(
        runs=own_partition.RUNS_TOKEN,
        attempts=own_partition.ATTEMPTS_TOKEN,
        assignments=_assignments(values, divert=to in _DIVERTIBLE),
        keyed=_RECORD_KEY_CTE if record_key else "",
        # The hand-off trigger wrote the children's runs with this statement; the partitions
        # of the job's children say which engine nodes to wake (jobs/services/dag_handoff.py).
        child_partitions=dag_handoff.CHILD_PARTITIONS_SQL.format(job_id="finished.job_id"),
        # The slot the run held frees with this statement: the oldest run its tenant's or its
        # job's running limit parked is made due now (jobs/services/running_limits.py). Left
        # out for a run that started without a limit: planning the release doubled this
        # statement's planning time (docs/limits.md, "Cost").
        released=running_limits.release_one_cte("finished") if release_slot else "",
        released_partitions=(
            running_limits.RELEASED_PARTITIONS_SQL if release_slot else "'{}'::int[]"
        ),
    )
    params = {
        **values,
        "run_id": run_id,
        "attempt": attempt,
        "running": RunState.RUNNING.value,
        "cancelled": RunState.CANCELLED.value,
        "cancel_note": f"cancelled on request; attempt {attempt} ended: ",
        "outcome": outcome,
        "now": now,
        "key_expires_at": now + dedup_ttl(),
    }
    row = own_partition.fetch_one(sql, params, run_id=run_id, now=now)
    if row is None:
        _note_refused(run_id=run_id, attempt=attempt, outcome=outcome, error=error, now=now)
        return None
    if row[2] != RunState.RETRY_WAIT:
        dag_handoff.wake_children(list(row[3]))
    notify_timers_due(list(row[4]))
    return _Finished(job_id=row[0], tenant_id=row[1], state=RunState(row[2]))


@transaction.atomic
def _note_refused(
    *, run_id: uuid.UUID, attempt: int, outcome: str, error: str, now: datetime
) -> None:
    # No stale fence (docs/architecture.md, Invariants): a zombie may note on its own row when
    # it ended, never the run's outcome; the reaper's 'lost' verdict stays.
    attempts = RunAttempt.objects.filter(run_id=run_id, attempt=attempt)
    note = f"late {outcome} refused: attempt {attempt} is no longer current. {error}"
    attempts.filter(finished_at__isnull=True).update(finished_at=now, error=note[:ERROR_MAX_CHARS])
    attempts.filter(outcome="").update(outcome=AttemptOutcome.LOST)


@_retried
def run_succeed(
    *,
    run_id: uuid.UUID,
    attempt: int,
    now: datetime,
    release_slot: bool = True,
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
            release_slot=release_slot,
            record_key=record_key,
            finished_at=now,
            result=result,
        )
        is not None
    )


@_retried
def run_retry(
    *,
    run_id: uuid.UUID,
    attempt: int,
    due_at: datetime,
    error: str,
    now: datetime,
    release_slot: bool = True,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> RunState | None:
    """Park a failed attempt in retry_wait until ``due_at``; the engine queues attempt + 1.

    The state the run ended in (retry_wait, or cancelled when its cancel had been requested),
    None when the attempt is stale. The wait lives in the database, never in a broker countdown:
    a countdown message lost with Redis would lose the retry (Redis is a hint,
    docs/architecture.md, Invariants).
    """
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.RETRY_WAIT,
        outcome=outcome,
        error=error,
        now=now,
        release_slot=release_slot,
        due_at=due_at,
        result=result,
    )
    return None if accepted is None else accepted.state


@_retried
def run_fail(
    *,
    run_id: uuid.UUID,
    attempt: int,
    error: str,
    now: datetime,
    release_slot: bool = True,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> RunState | None:
    """A permanent failure: retrying cannot fix it, so the run ends as failed (or cancelled when
    its cancel had been requested); None when the attempt is stale."""
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.FAILED,
        outcome=outcome,
        error=error,
        now=now,
        release_slot=release_slot,
        finished_at=now,
        result=result,
    )
    return None if accepted is None else accepted.state


@_retried
def run_cancelled(
    *, run_id: uuid.UUID, attempt: int, error: str, now: datetime, release_slot: bool = True
) -> bool:
    """The running attempt stopped because the run or its job was cancelled; not retried."""
    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.CANCELLED,
        outcome=AttemptOutcome.CANCELLED,
        error=error,
        now=now,
        release_slot=release_slot,
        finished_at=now,
    )
    return accepted is not None


# Retried as a whole transaction: the retry wraps the atomic block, never runs inside it.
@_retried
@transaction.atomic
def run_dead_letter(
    *,
    run_id: uuid.UUID,
    attempt: int,
    error: str,
    now: datetime,
    release_slot: bool = True,
    outcome: str = AttemptOutcome.FAILED,
    result: Any = None,
) -> RunState | None:
    """The last allowed attempt failed: run -> dead, a DeadLetter row, and (after commit) a
    message on the dead-letter queue for whatever alerts. The state the run ended in (dead, or
    cancelled when its cancel had been requested: no dead letter then), None when stale."""
    from jobs.services.dead_letters import dead_letter_announce
    from jobs.services.notifications import DeadLetterFact, notify_dead_letters

    accepted = _finish(
        run_id=run_id,
        attempt=attempt,
        to=RunState.DEAD,
        outcome=outcome,
        error=error,
        now=now,
        release_slot=release_slot,
        finished_at=now,
        result=result,
    )
    if accepted is None or accepted.state != RunState.DEAD:
        return None if accepted is None else accepted.state
    job_id, tenant_id = accepted.job_id, accepted.tenant_id
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
    # Notification webhooks: recorded in the outcome's transaction and delivered later by the
    # beat nodes, so a slow receiver never holds this worker (jobs/services/notifications.py).
    notify_dead_letters([DeadLetterFact(run_id, attempt, error)], now=now)
    transaction.on_commit(
        lambda: dead_letter_announce(
            run_id=run_id, job_id=job_id, attempts=attempt, error=error, now=now
        )
    )
    return RunState.DEAD
