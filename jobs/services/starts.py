"""Starting an attempt: the compare-and-set queued -> running, its attempt row, overlap policy."""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from beat_engine.backoff import RetryPolicy
from jobs import own_partition
from jobs.models import ConcurrencyPolicy
from jobs.services import overlap, running_limits
from jobs.services.runs import run_lease
from jobs.states import IN_FLIGHT_STATES, RunState
from jobs.targets import TargetSpec


class StartOutcome(enum.Enum):
    STARTED = "started"
    # Zero rows matched (state, attempt): a duplicate or stale message, dropped by the caller.
    STALE = "stale"
    # Held back by the job's concurrency policy and recorded as skipped, with the reason.
    SKIPPED = "skipped"
    # Held back by forbid after earlier attempts: back in retry_wait, its error kept.
    DEFERRED = "deferred"
    # Its tenant's or job's running limit was reached: parked in retry_wait until a slot frees
    # (jobs/services/running_limits.py), no attempt spent.
    HELD = "held"
    # Delivered before its due instant (a run claimed ahead, docs/engine.md "Claim ahead",
    # pushed by a clock a few milliseconds ahead of this one): not started, nothing changed;
    # the caller starts it again at ``not_before``.
    EARLY = "early"


@dataclass(frozen=True)
class StartedRun:
    """The attempt this worker now holds, with the job's fields that executing it needs."""

    id: uuid.UUID
    attempt: int
    job_id: uuid.UUID
    tenant_id: int
    scheduled_for: datetime
    dedup_key: str
    payload: Any
    target: TargetSpec
    retry: RetryPolicy
    critical: bool
    # No duplicate effect (docs/architecture.md, Invariants): a critical job whose firing's key
    # is already recorded must not run again.
    key_done: bool
    # The job's queue, and this attempt's start minus its due instant (database clock), for
    # the start lag histogram.
    queue: str = ""
    start_lag_s: float = 0.0
    # Started under a running limit (its tenant's or job's): its outcome hands the slot on
    # (jobs/services/running_limits.py); a run without one spares its outcome that work.
    limited: bool = False


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    run: StartedRun | None = None
    # The concurrency policy that held the run back (SKIPPED, DEFERRED); for HELD, the limit.
    policy: str = ""
    # EARLY: the run's due instant.
    not_before: datetime | None = None


# One statement, so one round trip and one commit: the CAS on (id, attempt, state) still decides,
# the attempt row is opened only for a run the CAS flipped, and the job's fields come back with
# it (no second read, no model instances). Jobs that forbid or replace overlap take it only once
# _start_with_policy holds their job row: a single statement cannot lock first and look after,
# its snapshot predates the lock wait, so two runs of one job could both see "nothing running".
# A key recorded by this very run counts even past its expiry: the purge keeps the keys of
# live and dead runs (jobs/services/history_retention.py), so a retry or a replay that starts
# after the TTL still finds its effect done.
# Cancel is final (docs/architecture.md, Invariants): a queued run whose cancel was requested
# (queued by an older reaper that did not look at the flag) never starts; the same statement
# ends it cancelled instead. A run whose tenant or job has a running limit is left to the
# locked path too, which counts under the tenant's lock (jobs/services/running_limits.py); for
# every other run the limit costs this statement one probe of the tenant's primary key.
# {runs} and {attempts}: the run's day partitions or the parent tables (jobs/own_partition.py).
_START_SQL = """
WITH refused AS (
    UPDATE {runs}
       SET state = %(cancelled)s, finished_at = %(now)s, due_at = NULL,
           last_error = 'cancelled on request before attempt ' || attempt || ' started'
     WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(queued)s AND cancel_requested
), started AS (
    UPDATE {runs} AS r
       SET state = %(running)s, started_at = %(now)s, heartbeat_at = %(now)s,
           lease_until = %(lease_until)s, worker = %(worker)s, finished_at = NULL, held_by = '',
           start_lag = COALESCE(r.start_lag, CASE WHEN r.attempt = 1
                                                  THEN %(now)s - COALESCE(r.due_at, r.scheduled_for)
                                             END)
      FROM jobs_job AS j, jobs_tenant AS t
     WHERE r.id = %(run_id)s AND r.attempt = %(attempt)s AND r.state = %(queued)s
       AND NOT r.cancel_requested
       -- Never before its due instant (docs/architecture.md, Invariants).
       AND (r.due_at IS NULL OR r.due_at <= %(now)s)
       AND j.id = r.job_id AND t.id = r.tenant_id
       AND ((j.concurrency_policy = %(allow)s AND {unlimited}) OR %(policy_applied)s)
    RETURNING r.id, r.attempt, r.epoch, r.queued_at, r.job_id, r.tenant_id, r.scheduled_for,
              r.dedup_key, j.payload, j.target_kind, j.target_name, j.target_url,
              j.target_headers, j.timeout, j.retry_on_client_error, j.max_attempts,
              j.retry_base_delay, j.retry_max_delay, j.retry_jitter, j.critical, j.queue,
              extract(epoch FROM %(now)s - COALESCE(r.due_at, r.scheduled_for)) AS waited,
              j.target_group, j.target_rate, j.target_burst
), opened AS (
    INSERT INTO {attempts} (run_id, attempt, epoch, worker, queued_at, started_at,
                                 outcome, error)
    SELECT id, attempt, epoch, %(worker)s, queued_at, %(now)s, '', '' FROM started
    ON CONFLICT (run_id, attempt) DO UPDATE
       SET worker = EXCLUDED.worker, started_at = EXCLUDED.started_at
)
SELECT s.id, s.attempt, s.job_id, s.tenant_id, s.scheduled_for, s.dedup_key, s.payload,
       s.target_kind, s.target_name, s.target_url, s.target_headers, s.timeout,
       s.retry_on_client_error, s.max_attempts, s.retry_base_delay, s.retry_max_delay,
       s.retry_jitter, s.critical,
       s.critical AND EXISTS (SELECT 1 FROM jobs_dedupkey AS d
                               WHERE d.key = s.dedup_key
                                 AND (d.expires_at > %(now)s OR d.run_id = s.id)),
       s.queue, s.waited, s.target_group, s.target_rate, s.target_burst
  FROM started AS s
""".replace("{unlimited}", running_limits.limited_clause("t", "j"))


def _loads(value: Any) -> Any:
    # Django registers a text loader for jsonb (JSONField decodes it), so raw rows carry text.
    return json.loads(value) if isinstance(value, str) else value


def _started_run(row: Sequence[Any]) -> StartedRun:
    return StartedRun(
        id=row[0],
        attempt=row[1],
        job_id=row[2],
        tenant_id=row[3],
        scheduled_for=row[4],
        dedup_key=row[5],
        payload=_loads(row[6]),
        target=TargetSpec(
            kind=row[7],
            name=row[8],
            url=row[9],
            headers=_loads(row[10]),
            timeout=row[11],
            retry_on_client_error=row[12],
            group=row[21],
            rate=row[22],
            burst=row[23],
        ),
        retry=RetryPolicy(
            max_attempts=row[13], base_delay=row[14], max_delay=row[15], jitter=row[16]
        ),
        critical=row[17],
        key_done=row[18],
        queue=row[19],
        start_lag_s=float(row[20]),
    )


def _start_statement(params: dict[str, Any], *, policy_applied: bool) -> StartedRun | None:
    row = own_partition.fetch_one(
        _START_SQL,
        {**params, "policy_applied": policy_applied},
        run_id=params["run_id"],
        now=params["now"],
    )
    return None if row is None else _started_run(row)


# The job's other runs in flight, read with its row locked (index run_in_flight_by_job). A run
# claimed ahead of an instant still to come is not in flight yet: it neither holds this one back
# nor is replaced by it (docs/engine.md, "Claim ahead").
_SIBLINGS_SQL = """
SELECT id, state, scheduled_for FROM jobs_jobrun
 WHERE job_id = %s AND state = ANY(%s) AND id <> %s
   AND NOT (state = 'queued' AND due_at IS NOT NULL AND due_at > %s)
"""

# Held back by the policy: skipped (it never started an attempt) or deferred to retry_wait
# (it has). A deferral gives back the attempt number the engine will hand out again when it
# queues the run (the timer queues attempt + 1), so no attempt is spent on a start that never
# happened, and in retry_wait the attempt is, as ever, the last one that started; its error is
# kept. A skip keeps any earlier error after its reason.
_HOLD_BACK_SQL = """
UPDATE jobs_jobrun
   SET state = %(to)s,
       attempt = CASE WHEN %(deferred)s THEN attempt - 1 ELSE attempt END,
       due_at = %(due_at)s, finished_at = %(finished_at)s,
       last_error = CASE WHEN %(deferred)s THEN last_error
                         WHEN last_error = '' THEN %(reason)s
                         ELSE %(reason)s || '; previous error: ' || last_error END
 WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(queued)s
"""

# What a starting run does to the older runs it replaces: a running one is asked to stop (its
# supervisor ends it cancelled at its next heartbeat), a waiting one ends cancelled, its last
# error kept after the reason. Rows are locked in id order, as every multi-run writer does.
_REPLACE_SQL = """
UPDATE jobs_jobrun AS r
   SET cancel_requested = true,
       state = CASE WHEN r.state = %(running)s THEN r.state ELSE %(cancelled)s END,
       finished_at = CASE WHEN r.state = %(running)s THEN r.finished_at ELSE %(now)s END,
       due_at = CASE WHEN r.state = %(running)s THEN r.due_at ELSE NULL END,
       last_error = CASE WHEN r.state = %(running)s THEN r.last_error
                         WHEN r.last_error = '' THEN %(reason)s
                         ELSE %(reason)s || '; previous error: ' || r.last_error END
 WHERE r.id IN (SELECT id FROM jobs_jobrun WHERE id = ANY(%(ids)s) AND state = ANY(%(states)s)
                 ORDER BY id FOR UPDATE)
   AND r.state = ANY(%(states)s)
"""

_IN_FLIGHT = sorted(state.value for state in IN_FLIGHT_STATES)


def _hold_back(params: dict[str, Any], policy: str, decision: overlap.Decision) -> StartResult:
    assert decision.blocker is not None
    deferred = decision.verdict == overlap.Verdict.DEFER
    now = params["now"]
    with connection.cursor() as cursor:
        cursor.execute(
            _HOLD_BACK_SQL,
            {
                **params,
                "to": (RunState.RETRY_WAIT if deferred else RunState.SKIPPED).value,
                "deferred": deferred,
                # Deferred for one run lease: by then the blocking run has heartbeated on or
                # been reaped, and the run is queued again to look.
                "due_at": now + run_lease() if deferred else None,
                "finished_at": None if deferred else now,
                "reason": overlap.skip_reason(policy, decision.blocker),  # skips only
            },
        )
        moved = cursor.rowcount == 1
    if not moved:
        return StartResult(StartOutcome.STALE)
    return StartResult(StartOutcome.DEFERRED if deferred else StartOutcome.SKIPPED, policy=policy)


def _replace_older(params: dict[str, Any], replaced: Sequence[overlap.Sibling]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            _REPLACE_SQL,
            {
                "ids": [sibling.id for sibling in replaced],
                "states": _IN_FLIGHT,
                "running": RunState.RUNNING.value,
                "cancelled": RunState.CANCELLED.value,
                "now": params["now"],
                "reason": overlap.replaced_reason(params["run_id"]),
            },
        )


def _unstartable(row: Sequence[Any] | None, params: dict[str, Any]) -> StartResult | None:
    """STALE when the run is not queued at this attempt, EARLY before its due instant."""
    if row is None or (row[3], row[4]) != (RunState.QUEUED.value, params["attempt"]):
        # Not this attempt's to start: a stale delivery holds nothing back, replaces nothing.
        return StartResult(StartOutcome.STALE)
    if row[8] is not None and row[8] > params["now"] and not row[5]:
        return StartResult(StartOutcome.EARLY, not_before=row[8])
    return None


def _start_with_policy(params: dict[str, Any]) -> StartResult:
    """The start for jobs that forbid or replace overlap, with their job row locked.

    The lock makes the runs of one job start one at a time, each seeing what the previous one
    committed (every statement in READ COMMITTED reads afresh), so two runs can never both
    find the way clear. One lock order (docs/architecture.md, Invariants): the job row first,
    FOR NO KEY UPDATE, then its runs.
    """
    run_id = params["run_id"]
    with transaction.atomic(), connection.cursor() as cursor:
        # The tenant's running-limit lock before the job row (one lock order).
        tenant_limit = running_limits.lock_tenant(cursor, run_id)
        cursor.execute(
            """
            SELECT j.id, j.concurrency_policy, r.scheduled_for, r.state, r.attempt,
                   r.cancel_requested, j.max_running_runs, r.tenant_id, r.due_at
              FROM jobs_job AS j
              JOIN jobs_jobrun AS r ON r.job_id = j.id
             WHERE r.id = %s FOR NO KEY UPDATE OF j
            """,
            [run_id],
        )
        row = cursor.fetchone()
        unstartable = _unstartable(row, params)
        if unstartable is not None:
            return unstartable
        job_id, policy, scheduled_for = row[0], row[1], row[2]
        if row[5]:
            # Cancelled before it started: the start statement ends it cancelled (cancel is
            # final), and a run that will not start holds nothing back and replaces nothing.
            started = _start_statement(params, policy_applied=True)
            return StartResult(
                StartOutcome.STALE if started is None else StartOutcome.STARTED, started
            )
        others: list[overlap.Sibling] = []
        if policy != ConcurrencyPolicy.ALLOW:
            cursor.execute(_SIBLINGS_SQL, [job_id, _IN_FLIGHT, run_id, params["now"]])
            others = [overlap.Sibling(r[0], RunState(r[1]), r[2]) for r in cursor.fetchall()]
        decision = overlap.decide(
            policy, scheduled_for=scheduled_for, attempt=params["attempt"], others=others
        )
        if decision.verdict != overlap.Verdict.START:
            return _hold_back(params, policy, decision)
        limited = tenant_limit is not None or row[6] is not None
        if limited:
            held = _held_by_limit(cursor, params, row, tenant_limit)
            if held is not None:
                return held
        started = _start_statement(params, policy_applied=True)
        if started is None:
            return StartResult(StartOutcome.STALE)
        if limited:
            started = replace(started, limited=True)
        if decision.replaces:
            # After the CAS, so a stale duplicate replaces nothing. A running attempt stops at
            # its next heartbeat; this run does not wait for it.
            _replace_older(params, decision.replaces)
        return StartResult(StartOutcome.STARTED, started)


def _held_by_limit(
    cursor: Any, params: dict[str, Any], row: Sequence[Any], tenant_limit: int | None
) -> StartResult | None:
    """Parked when the tenant's or the job's running limit holds the run back, else None.

    Counted under the tenant's lock and the job's row lock, which this transaction holds."""
    job_limit = row[6]
    hold = running_limits.hold_for(
        cursor,
        run_id=params["run_id"],
        tenant_id=row[7],
        job_id=row[0],
        scheduled_for=row[2],
        tenant_limit=tenant_limit,
        job_limit=job_limit,
        now=params["now"],
    )
    if hold is None:
        return None
    limit = tenant_limit if hold == running_limits.Hold.TENANT else job_limit
    parked = running_limits.park(
        cursor,
        run_id=params["run_id"],
        attempt=params["attempt"],
        hold=hold,
        limit=limit,
        now=params["now"],
    )
    if not parked:
        return StartResult(StartOutcome.STALE)
    return StartResult(StartOutcome.HELD, policy=hold.value)


def run_start(*, run_id: uuid.UUID, attempt: int, worker: str, now: datetime) -> StartResult:
    """Compare-and-set queued -> running for exactly this attempt, then open its attempt row."""
    params = {
        "run_id": run_id,
        "attempt": attempt,
        "worker": worker,
        "now": now,
        "lease_until": now + run_lease(),
        "running": RunState.RUNNING.value,
        "queued": RunState.QUEUED.value,
        "cancelled": RunState.CANCELLED.value,
        "allow": ConcurrencyPolicy.ALLOW.value,
    }
    started = _start_statement(params, policy_applied=False)
    if started is not None:
        return StartResult(StartOutcome.STARTED, started)
    # Zero rows: a stale or duplicate delivery, or a job whose policy or running limit needs
    # locks. The locked path tells them apart and decides again, so a policy or limit changed
    # meanwhile is honoured.
    return _start_with_policy(params)
