"""Starting an attempt: the compare-and-set queued -> running, its attempt row, overlap policy."""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from beat_engine.backoff import RetryPolicy
from jobs.models import ConcurrencyPolicy, JobRun
from jobs.services.runs import run_lease, run_transition
from jobs.states import RunState
from jobs.targets import TargetSpec


class StartOutcome(enum.Enum):
    STARTED = "started"
    # Zero rows matched (state, attempt): a duplicate or stale message, dropped by the caller.
    STALE = "stale"
    # The job forbids overlap and another run of it is running: recorded as skipped.
    SKIPPED = "skipped"


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
    # Invariant 2: a critical job whose firing's key is already recorded must not run again.
    key_done: bool


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    run: StartedRun | None = None


# One statement, so one round trip and one commit: the CAS on (id, attempt, state) still decides,
# the attempt row is opened only for a run the CAS flipped, and the job's fields come back with
# it (no second read, no model instances). Jobs that forbid or replace overlap take it only once
# _start_with_policy holds their job row: a single statement cannot lock first and look after,
# its snapshot predates the lock wait, so two runs of one job could both see "nothing running".
_START_SQL = """
WITH started AS (
    UPDATE jobs_jobrun AS r
       SET state = %(running)s, started_at = %(now)s, heartbeat_at = %(now)s,
           lease_until = %(lease_until)s, worker = %(worker)s, finished_at = NULL
      FROM jobs_job AS j
     WHERE r.id = %(run_id)s AND r.attempt = %(attempt)s AND r.state = %(queued)s
       AND j.id = r.job_id AND (j.concurrency_policy = %(allow)s OR %(policy_applied)s)
    RETURNING r.id, r.attempt, r.epoch, r.queued_at, r.job_id, r.tenant_id, r.scheduled_for,
              r.dedup_key, j.payload, j.target_kind, j.target_name, j.target_url,
              j.target_headers, j.timeout, j.retry_on_client_error, j.max_attempts,
              j.retry_base_delay, j.retry_max_delay, j.retry_jitter, j.critical
), opened AS (
    INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, queued_at, started_at,
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
                               WHERE d.key = s.dedup_key AND d.expires_at > %(now)s)
  FROM started AS s
"""


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
        ),
        retry=RetryPolicy(
            max_attempts=row[13], base_delay=row[14], max_delay=row[15], jitter=row[16]
        ),
        critical=row[17],
        key_done=row[18],
    )


def _start_statement(params: dict[str, Any], *, policy_applied: bool) -> StartedRun | None:
    with connection.cursor() as cursor:
        cursor.execute(_START_SQL, {**params, "policy_applied": policy_applied})
        row = cursor.fetchone()
    return None if row is None else _started_run(row)


def _start_with_policy(params: dict[str, Any]) -> StartResult:
    """The start for jobs that forbid or replace overlap, with their job row locked."""
    run_id = params["run_id"]
    with transaction.atomic(), connection.cursor() as cursor:
        # Lock the job row so two runs of one job starting at once see each other: without it
        # both could find "nothing running" and overlap under forbid.
        cursor.execute(
            """
            SELECT j.id, j.concurrency_policy FROM jobs_job AS j
              JOIN jobs_jobrun AS r ON r.job_id = j.id
             WHERE r.id = %s FOR NO KEY UPDATE OF j
            """,
            [run_id],
        )
        job = cursor.fetchone()
        if job is None:
            return StartResult(StartOutcome.STALE)
        others = JobRun.objects.filter(job_id=job[0], state=RunState.RUNNING).exclude(id=run_id)
        if job[1] == ConcurrencyPolicy.FORBID and others.exists():
            skipped = run_transition(
                run_id=run_id,
                to=RunState.SKIPPED,
                attempt=params["attempt"],
                from_states=[RunState.QUEUED],
                finished_at=params["now"],
                last_error="skipped: the previous run of this job is still running (forbid)",
            )
            return StartResult(StartOutcome.SKIPPED if skipped else StartOutcome.STALE)
        started = _start_statement(params, policy_applied=True)
        if started is None:
            return StartResult(StartOutcome.STALE)
        if job[1] == ConcurrencyPolicy.REPLACE:
            # After the CAS, so a stale duplicate cancels nothing. The running attempts stop at
            # their next heartbeat; this run does not wait for them.
            others.update(cancel_requested=True)
        return StartResult(StartOutcome.STARTED, started)


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
        "allow": ConcurrencyPolicy.ALLOW.value,
    }
    started = _start_statement(params, policy_applied=False)
    if started is not None:
        return StartResult(StartOutcome.STARTED, started)
    # Zero rows: a stale or duplicate delivery, or a job whose policy needs its row locked. The
    # locked path tells them apart and decides again, so a policy changed meanwhile is honoured.
    return _start_with_policy(params)
