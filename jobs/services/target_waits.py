"""Runs held back by their target's rate limit wait in PostgreSQL, no attempt spent
(docs/limits.md, "Per-target rate limits").

The worker asks the target's bucket (jobs/target_limits.py) for a token after its start's
compare-and-set, since the start statement is what reads the job's fields; a run refused a
token, or answered 429/503 by its target, is put back in ``retry_wait`` until its turn, with
the attempt number given back (as a forbid deferral does, jobs/services/starts.py): the timer
that queues it again (beat_engine/timers.py) hands out the same attempt number, so waiting for
a target never spends the retry budget, never counts as a failure and never sits in a broker
countdown that Redis could lose (Redis is a hint, docs/architecture.md, Invariants). Each wait
adds one to the firing's ``DecisionReason`` row (kind deferred_target_limit or
throttled_by_target), so "why did it start late" has an answer.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from jobs.db_failover import retry_on_failover
from jobs.models_reasons import ReasonKind
from jobs.notify import notify_timers_due
from jobs.outcomes import ResultKind, TargetResult
from jobs.retry_after import RETRY_AFTER_STATUSES
from jobs.services import running_limits
from jobs.services.starts import StartedRun
from jobs.states import AttemptOutcome, RunState
from jobs.target_limits import RUNS_HELD, Bucket, BucketStore, store


class Held(enum.Enum):
    # Back in retry_wait until its turn.
    WAITING = "waiting"
    # Its cancel had been requested: ended cancelled instead (cancel is final).
    CANCELLED = "cancelled"
    # The attempt was no longer current (its lease lost meanwhile): nothing changed.
    STALE = "stale"


# One statement: the compare-and-set on (id, attempt, running) decides, the attempt row this
# start opened is dropped (the attempt never ran the target, or its answer was "not now"), and
# the firing's reason counts one more wait. Cancel is final (docs/architecture.md, Invariants):
# a run whose cancel was requested meanwhile ends cancelled, its attempt row closed as such.
# The attempts are matched on the run id as a constant too, which prunes them to the run's
# partition (as the outcome statement does, jobs/services/runs.py).
_PARK_SQL = f"""
WITH parked AS (
    UPDATE jobs_jobrun
       SET state = CASE WHEN cancel_requested THEN '{RunState.CANCELLED.value}'
                        ELSE '{RunState.RETRY_WAIT.value}' END,
           attempt = CASE WHEN cancel_requested THEN attempt ELSE attempt - 1 END,
           due_at = CASE WHEN cancel_requested THEN NULL ELSE %(due_at)s END,
           finished_at = CASE WHEN cancel_requested THEN %(now)s ELSE NULL END,
           lease_until = NULL, heartbeat_at = NULL,
           last_error = CASE WHEN cancel_requested
                             THEN 'cancelled on request before attempt ' || attempt || ' ran'
                             ELSE last_error END
     WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = '{RunState.RUNNING.value}'
    RETURNING id, job_id, tenant_id, scheduled_for, state
), dropped AS (
    DELETE FROM jobs_runattempt AS a USING parked AS p
     WHERE a.run_id = %(run_id)s AND a.run_id = p.id AND a.attempt = %(attempt)s
       AND p.state = '{RunState.RETRY_WAIT.value}'
), closed AS (
    UPDATE jobs_runattempt AS a
       SET outcome = '{AttemptOutcome.CANCELLED.value}', finished_at = %(now)s,
           error = 'cancelled on request'
      FROM parked AS p
     WHERE a.run_id = %(run_id)s AND a.run_id = p.id AND a.attempt = %(attempt)s
       AND p.state = '{RunState.CANCELLED.value}'
), reason AS (
    INSERT INTO jobs_decisionreason (job_id, tenant_id, kind, first_at, last_at, count,
                                     recorded_at, updated_at, detail)
    SELECT job_id, tenant_id, %(kind)s, scheduled_for, scheduled_for, 1, %(now)s, %(now)s,
           %(detail)s
      FROM parked WHERE state = '{RunState.RETRY_WAIT.value}'
    ON CONFLICT (job_id, kind, first_at) DO UPDATE
       SET count = jobs_decisionreason.count + 1, updated_at = EXCLUDED.updated_at,
           detail = EXCLUDED.detail
){running_limits.release_one_cte("parked")}
SELECT state, {running_limits.RELEASED_PARTITIONS_SQL} FROM parked
"""

# The throttled waits a firing already had: past TARGET_THROTTLE_WAITS a 429/503 counts as the
# failed attempt it is, so a target that never stops refusing still ends dead-lettered.
_THROTTLED_SQL = """
SELECT count FROM jobs_decisionreason
 WHERE job_id = %s AND kind = %s AND first_at = %s
"""


def _park(run: StartedRun, *, wait_s: float, now: datetime, kind: ReasonKind, detail: str) -> Held:
    params: dict[str, Any] = {
        "run_id": run.id,
        "attempt": run.attempt,
        "now": now,
        "due_at": now + timedelta(seconds=wait_s),
        "kind": kind.value,
        "detail": detail[:200],
    }

    def write() -> Held:
        with connection.cursor() as cursor:
            cursor.execute(_PARK_SQL, params)
            row = cursor.fetchone()
        if row is None:
            return Held.STALE
        # The slot the run held under a running limit is handed on in the same statement.
        notify_timers_due(list(row[1]))
        return Held.WAITING if row[0] == RunState.RETRY_WAIT else Held.CANCELLED

    # Repeated on a new connection while the primary is lost (jobs/db_failover.py): a lost
    # commit makes the repeat match no running row at this attempt, so it changes nothing.
    return retry_on_failover(write)


def _limit_text(bucket: Bucket, rate: float) -> str:
    lowered = f" (lowered to {rate:.3g}/s)" if rate < bucket.rate * 0.999 else ""
    return f"target {bucket.target}: {bucket.rate:g}/s, burst {bucket.burst}{lowered}"


def hold_if_over(
    run: StartedRun, bucket: Bucket, *, now: datetime, buckets: BucketStore = store
) -> Held | None:
    """Take a token for ``run``; None when it may call its target now, else how it waits."""
    take = buckets.take(bucket)
    if take.allowed:
        return None
    held = _park(
        run,
        wait_s=take.wait_s,
        now=now,
        kind=ReasonKind.DEFERRED_TARGET_LIMIT,
        detail=f"{_limit_text(bucket, take.rate)}; next look in {take.wait_s:g}s",
    )
    RUNS_HELD.labels(tenant=str(run.tenant_id), target=bucket.target, reason="limit").inc()
    return held


def is_throttle(result: TargetResult) -> bool:
    """A 429 or 503 answer: the target asks for less traffic."""
    return (
        result.kind == ResultKind.RETRYABLE
        and isinstance(result.result, dict)
        and result.result.get("status") in RETRY_AFTER_STATUSES
    )


def hold_throttled(
    run: StartedRun,
    bucket: Bucket,
    result: TargetResult,
    *,
    now: datetime,
    buckets: BucketStore = store,
) -> Held | None:
    """Lower the target's rate after its 429/503; the run waits its turn again (None: it has
    waited out TARGET_THROTTLE_WAITS such answers already, and this one counts as failed)."""
    retry_after = result.retry_after.total_seconds() if result.retry_after is not None else 0.0
    turn = buckets.penalize(bucket, retry_after_s=retry_after)
    with connection.cursor() as cursor:
        cursor.execute(
            _THROTTLED_SQL, [run.job_id, ReasonKind.THROTTLED_BY_TARGET.value, run.scheduled_for]
        )
        row = cursor.fetchone()
    if (row[0] if row is not None else 0) >= int(settings.SCHEDULER["TARGET_THROTTLE_WAITS"]):
        return None
    status = result.result.get("status") if isinstance(result.result, dict) else None
    held = _park(
        run,
        wait_s=turn.wait_s,
        now=now,
        kind=ReasonKind.THROTTLED_BY_TARGET,
        detail=f"HTTP {status} from {_limit_text(bucket, turn.rate)}; "
        f"next look in {turn.wait_s:g}s",
    )
    RUNS_HELD.labels(tenant=str(run.tenant_id), target=bucket.target, reason="throttled").inc()
    return held
