"""Durable timers fired from the database: due pending/retry_wait runs and expired run leases."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from beat_engine.errors import FencedOut
from beat_engine.fencing import fence
from beat_engine.publisher import QueuedRun
from jobs.models import JobStatus, RunTrigger
from jobs.run_ids import run_id_floor
from jobs.services import running_limits
from jobs.services.notifications import DeadLetterFact, notify_dead_letters
from jobs.states import TIMER_STATES, AttemptOutcome, RunState

_TIMER_STATES = sorted(state.value for state in TIMER_STATES)


# The live floor's bound on the statements below and the sweep's (beat_engine/live_floor.py).
def bound_params(since: datetime | None) -> list[Any]:
    """The three parameters of ``bound_sql``: None for an unbounded pass."""
    floor_id: uuid.UUID | None = None if since is None else run_id_floor(since)
    return [since, since, floor_id]


def bound_sql(alias: str = "") -> str:
    """``scheduled_for >= since AND id >= run_id_floor(since)``, or true when since is NULL.

    The statements are sent with their parameters inlined (client-side binding), so the
    planner folds ``NULL IS NULL`` to true and a given instant to a plain bound, and prunes the
    partitions before it. The id bound is what prunes: the partition key is the run id."""
    column = f"{alias}." if alias else ""
    return (
        f"(%s::timestamptz IS NULL OR ({column}scheduled_for >= %s::timestamptz"
        f" AND {column}id >= %s::uuid))"
    )


# Each UPDATE is a compare-and-set: the WHERE repeats the source state (and attempt), so a
# worker or another node that moved the run first makes it a no-op (no stale fence,
# docs/architecture.md, Invariants).
FIRE_TIMERS_SQL = f"""
WITH mine(partition, epoch) AS (SELECT * FROM unnest(%s::int[], %s::bigint[])),
due AS (
    SELECT id FROM jobs_jobrun
     WHERE partition = ANY(%s::int[]) AND state = ANY(%s::text[]) AND due_at <= %s
       AND {bound_sql()}
       -- Pause holds the runs the hand-off wrote for a job (docs/dags.md, "Cancel and
       -- pause"): they stay pending until it is resumed. A retry of a started run, and a
       -- firing claimed before the pause, go on. The job is read only for those runs, by a
       -- scalar subquery probed by primary key per row: an EXISTS could be planned as a hash
       -- of every paused job, a scan of the job table on every pass.
       AND (state <> '{RunState.PENDING.value}' OR trigger <> '{RunTrigger.UPSTREAM.value}'
            OR (SELECT p.status FROM jobs_job p WHERE p.id = jobs_jobrun.job_id)
               <> '{JobStatus.PAUSED.value}')
     ORDER BY due_at, scheduled_for
     LIMIT %s
       FOR UPDATE SKIP LOCKED)
UPDATE jobs_jobrun r
   SET state = '{RunState.QUEUED.value}', attempt = r.attempt + 1, queued_at = %s,
       epoch = mine.epoch, published_at = NULL
  FROM mine, jobs_job j
 -- The due ids as one array probed by primary key. Joined as a table instead, the planner,
 -- told by the statistics that few runs are pending, scanned every pending run and compared
 -- each with every due id: 10,000 children made pending by one parent cost 3.5-6 s per batch
 -- of 1,000 that way, 0.17-0.22 s this way (EXPLAIN ANALYZE on this 2-core machine).
 WHERE r.id = ANY(ARRAY(SELECT id FROM due)) AND mine.partition = r.partition
   AND j.id = r.job_id AND r.state = ANY(%s::text[]) AND {bound_sql("r")}
RETURNING r.id, r.attempt, r.partition, j.queue, j.priority, r.due_at
"""

# The earliest timer not due yet, so that the next pass runs when it falls due rather than a
# poll later: a child's run is due at its parent's finish as the worker's clock read it, which
# may be a few ms ahead of this node's reading of the same database clock; its pass, woken by
# the change feed at once, found it not yet due and left it for the poll (the 0.5 s hops of a
# chain, bench/bench_dag.py). One probe of run_timer_by_partition per partition: the states
# written out, as that index's predicate, so the planner can use it.
NEXT_TIMER_SQL = f"""
SELECT min(n.due_at)
  FROM unnest(%s::int[]) AS p(partition)
 CROSS JOIN LATERAL (
       SELECT due_at FROM jobs_jobrun
        WHERE partition = p.partition AND due_at > %s AND {bound_sql()}
          AND state IN ({", ".join(f"'{state}'" for state in _TIMER_STATES)})
        ORDER BY due_at LIMIT 1) AS n
"""

EXPIRED_LEASES_SQL = f"""
SELECT r.id, r.attempt, r.partition, j.max_attempts, r.cancel_requested
  FROM jobs_jobrun r JOIN jobs_job j ON j.id = r.job_id
 WHERE r.partition = ANY(%s::int[]) AND r.state = '{RunState.RUNNING.value}'
   AND r.lease_until < %s AND {bound_sql("r")}
 ORDER BY r.lease_until
 LIMIT %s
   FOR UPDATE OF r SKIP LOCKED
"""

REQUEUE_LOST_SQL = f"""
UPDATE jobs_jobrun r
   SET state = '{RunState.QUEUED.value}', attempt = r.attempt + 1, queued_at = %s,
       epoch = u.epoch, published_at = NULL, lease_until = NULL, worker = '',
       started_at = NULL, heartbeat_at = NULL,
       last_error = 'attempt ' || r.attempt || ': lease expired (worker lost)'
  FROM unnest(%s::uuid[], %s::int[], %s::bigint[]) AS u(id, attempt, epoch), jobs_job j
 WHERE r.id = u.id AND r.state = '{RunState.RUNNING.value}' AND r.attempt = u.attempt
   AND NOT r.cancel_requested AND j.id = r.job_id
RETURNING r.id, r.attempt, r.partition, j.queue, j.priority
"""

# Cancel is final (docs/architecture.md, Invariants): a run whose cancel was requested and whose
# worker died before confirming it ends cancelled; it is never queued as a new attempt.
CANCEL_LOST_SQL = f"""
UPDATE jobs_jobrun r
   SET state = '{RunState.CANCELLED.value}', finished_at = %s, lease_until = NULL,
       due_at = NULL,
       last_error = 'cancelled on request; attempt ' || r.attempt
                    || ': lease expired (worker lost) before it stopped'
  FROM unnest(%s::uuid[], %s::int[]) AS u(id, attempt)
 WHERE r.id = u.id AND r.state = '{RunState.RUNNING.value}' AND r.attempt = u.attempt
   AND r.cancel_requested
"""

KILL_LOST_SQL = f"""
UPDATE jobs_jobrun r
   SET state = '{RunState.DEAD.value}', finished_at = %s,
       last_error = 'attempt ' || r.attempt || ' of ' || r.attempt
                    || ': lease expired (worker lost); no attempts left'
  FROM unnest(%s::uuid[], %s::int[]) AS u(id, attempt)
 WHERE r.id = u.id AND r.state = '{RunState.RUNNING.value}' AND r.attempt = u.attempt
   AND NOT r.cancel_requested
RETURNING r.id, r.job_id, r.tenant_id, r.attempt, r.last_error
"""

DEAD_LETTER_SQL = """
INSERT INTO jobs_deadletter (run_id, job_id, tenant_id, attempts, last_error, moved_at,
                             replay_count)
SELECT u.run_id, u.job_id, u.tenant_id, u.attempts, u.last_error, %s, 0
  FROM unnest(%s::uuid[], %s::uuid[], %s::bigint[], %s::int[], %s::text[])
       AS u(run_id, job_id, tenant_id, attempts, last_error)
ON CONFLICT (run_id) DO UPDATE
   SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
       moved_at = EXCLUDED.moved_at
"""

LOSE_ATTEMPTS_SQL = f"""
UPDATE jobs_runattempt a
   SET outcome = '{AttemptOutcome.LOST.value}', finished_at = %s,
       error = 'lease expired: the worker stopped heartbeating'
  FROM unnest(%s::uuid[], %s::int[]) AS u(run_id, attempt)
 WHERE a.run_id = u.run_id AND a.attempt = u.attempt AND a.outcome = ''
"""


@dataclass
class TimerResult:
    queued: list[QueuedRun] = field(default_factory=list)
    fired: int = 0
    reaped: int = 0
    dead: int = 0
    # Expired leases of runs whose cancel was requested: ended cancelled, not re-queued.
    cancelled: int = 0
    fenced_out: FencedOut | None = None
    # When the pass was not full: the earliest pending/retry_wait run not yet due, if any.
    next_due: datetime | None = None
    # (run, job, attempts, error) of runs moved to dead, announced once the move commits.
    dead_runs: list[tuple[uuid.UUID, uuid.UUID, int, str]] = field(default_factory=list)


# The oldest firing of a live run in any partition: the live floor (beat_engine/live_floor.py).
# One branch per partial index whose predicate it repeats (run_timer_by_partition,
# run_lease_by_partition, run_unpublished_by_partition, run_sent_unstarted), so each reads the
# live runs alone, never the finished history. Unbounded in time, and read every
# READ_EVERY_S off the tick's thread (beat_engine/live_floor_reader.py): it is what lets the
# other statements be bounded.
OLDEST_LIVE_SQL = f"""
SELECT min(m) FROM (
    SELECT min(scheduled_for) AS m FROM jobs_jobrun
     WHERE state IN ({", ".join(f"'{state}'" for state in _TIMER_STATES)})
    UNION ALL
    SELECT min(scheduled_for) FROM jobs_jobrun
     WHERE state = '{RunState.RUNNING.value}'
    UNION ALL
    SELECT min(scheduled_for) FROM jobs_jobrun
     WHERE state = '{RunState.QUEUED.value}'
       AND published_at IS NULL
    UNION ALL
    SELECT min(scheduled_for) FROM jobs_jobrun
     WHERE state = '{RunState.QUEUED.value}'
       AND published_at IS NOT NULL
) AS live
"""


def oldest_live_firing() -> datetime | None:
    with connection.cursor() as cursor:
        cursor.execute(OLDEST_LIVE_SQL)
        found: datetime | None = cursor.fetchone()[0]
        return found


def fire_timers(
    epochs: Mapping[int, int], *, now: datetime, limit: int, since: datetime | None = None
) -> TimerResult:
    """In one fenced transaction: queue due pending/retry_wait runs as their next attempt, and
    re-queue (or dead-letter, when attempts are spent) running runs whose lease expired.

    ``since``: only runs fired from then on (beat_engine/live_floor.py); None looks at all."""
    bound = bound_params(since)
    result = TimerResult()
    with transaction.atomic():
        ours = fence(epochs, now=now)
        if ours != frozenset(epochs):
            result.fenced_out = FencedOut(frozenset(epochs) - ours)
        if not ours:
            return result
        parts = sorted(ours)
        mine = {p: epochs[p] for p in parts}
        with connection.cursor() as cursor:
            cursor.execute(
                FIRE_TIMERS_SQL,
                [parts, [mine[p] for p in parts], parts, _TIMER_STATES, now, *bound, limit, now,
                 _TIMER_STATES, *bound],
            )  # fmt: skip
            result.queued = [QueuedRun(*row) for row in cursor.fetchall()]
            result.fired = len(result.queued)
            if result.fired < limit:
                cursor.execute(NEXT_TIMER_SQL, [parts, now, *bound])
                result.next_due = cursor.fetchone()[0]
            _reap(cursor, result, mine, now=now, limit=limit, bound=bound)
    # The dead-letter notices of result.dead_runs are the caller's to send, after commit and
    # off the engine's thread (beat_engine/notices.py): a slow broker must not stall the tick.
    return result


def _reap(
    cursor: CursorWrapper,
    result: TimerResult,
    epochs: Mapping[int, int],
    *,
    now: datetime,
    limit: int,
    bound: list[Any],
) -> None:
    cursor.execute(EXPIRED_LEASES_SQL, [sorted(epochs), now, *bound, limit])
    expired = cursor.fetchall()
    if not expired:
        return
    # The rows are locked (FOR UPDATE above), so the flag read here is the one each UPDATE sees.
    cancelled = [(rid, att) for rid, att, _part, _most, flagged in expired if flagged]
    retry = [
        (rid, att, epochs[part]) for rid, att, part, most, flagged in expired
        if att < most and not flagged
    ]  # fmt: skip
    spent = [
        (rid, att) for rid, att, _part, most, flagged in expired if att >= most and not flagged
    ]
    cursor.execute(LOSE_ATTEMPTS_SQL, [now, [r[0] for r in expired], [r[1] for r in expired]])
    if cancelled:
        cursor.execute(CANCEL_LOST_SQL, [now, [r[0] for r in cancelled], [r[1] for r in cancelled]])
        result.cancelled = cursor.rowcount
    if retry:
        cursor.execute(
            REQUEUE_LOST_SQL,
            [now, [r[0] for r in retry], [r[1] for r in retry], [r[2] for r in retry]],
        )
        requeued = [QueuedRun(*row) for row in cursor.fetchall()]
        result.queued.extend(requeued)
        result.reaped += len(requeued)
    if spent:
        cursor.execute(KILL_LOST_SQL, [now, [r[0] for r in spent], [r[1] for r in spent]])
        dead = cursor.fetchall()
        result.dead = len(dead)
        result.dead_runs = [(run, job, attempts, error) for run, job, _t, attempts, error in dead]
        if dead:
            columns = [list(column) for column in zip(*dead, strict=True)]
            cursor.execute(DEAD_LETTER_SQL, [now, *columns])
            # Webhook deliveries in the same transaction; sent later, off this path.
            notify_dead_letters(
                [DeadLetterFact(run, attempts, error) for run, _j, _t, attempts, error in dead],
                now=now,
            )
    # Every reaped run left running: its slot is returned now that its lease has expired, so
    # as many runs parked by its tenant's or job's running limit are released.
    running_limits.release_after(cursor, [row[0] for row in expired], now=now)
