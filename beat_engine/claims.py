"""claim_due_batch: fence epochs, read due jobs, advance them by compare-and-set, insert runs."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.db import transaction

from beat_engine.catchup import CatchUpPolicy, plan_catch_up
from beat_engine.errors import FencedOut
from beat_engine.fencing import fence, server_cursor
from beat_engine.heap import DueEntry
from beat_engine.jitter import jitter_offset
from beat_engine.pg_arrays import int_array, text_array, timestamp_array, uuid_array
from beat_engine.publisher import QueuedRun
from beat_engine.quotas import TenantAllowances, within_allowance
from beat_engine.schedules import ScheduleKind, ScheduleSpec, next_fire_after
from jobs.models import JobStatus, RunTrigger
from jobs.services.dedup import dedup_key_for
from jobs.states import RunState

# A plain read: no row locks (FOR UPDATE wrote a lock into every due tuple, a second write of
# each row per claim). The compare-and-set in CLAIM_SQL refuses rows that changed since.
DUE_JOBS_SQL = """
SELECT id, tenant_id, partition, kind, cron_expression, interval_seconds, anchor_at, run_at,
       timezone, next_fire_at, queue, priority, catchup_policy, catchup_limit,
       starting_deadline, jitter_window, version
  FROM jobs_job
 WHERE id = ANY(%s::uuid[]) AND partition = ANY(%s::int[])
   AND status = 'active' AND next_fire_at <= %s
"""

# One statement for the whole batch. The UPDATE advances only jobs still as read (same
# next_fire_at and version, still active: an API edit or pause in between bumps the version
# and wins); runs are inserted only for the jobs it advanced. Invariant 2: the unique
# (job, scheduled_for) key makes a second claim of a firing a no-op, whoever races us.
CLAIM_SQL = """
WITH advanced AS (
    UPDATE jobs_job j
       SET next_fire_at = u.next_fire_at, last_fire_at = u.last_fire_at, status = u.status
      FROM unnest(%s::uuid[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                  %s::timestamptz[], %s::int[])
           AS u(id, next_fire_at, last_fire_at, status, expected_at, expected_version)
     WHERE j.id = u.id AND j.status = 'active' AND j.next_fire_at = u.expected_at
       AND j.version = u.expected_version
    RETURNING j.id
), inserted AS (
    INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                             due_at, attempt, epoch, dedup_key, queued_at, finished_at,
                             last_error, created_at, worker, cancel_requested, replayed_count)
    SELECT r.*, '', false, 0
      FROM unnest(%s::uuid[], %s::uuid[], %s::bigint[], %s::int[], %s::timestamptz[],
                  %s::text[], %s::text[], %s::timestamptz[], %s::int[], %s::bigint[],
                  %s::text[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                  %s::timestamptz[])
           AS r(id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at,
                attempt, epoch, dedup_key, queued_at, finished_at, last_error, created_at)
     WHERE r.job_id IN (SELECT id FROM advanced)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING id
)
SELECT true, id FROM advanced UNION ALL SELECT false, id FROM inserted
"""

# A job deferred because its tenant is at max_queued_runs is looked at again after this long.
QUOTA_RETRY = timedelta(seconds=1)

_MISSED_REASON = "missed: later than the job's starting deadline or skipped by catch-up"


@dataclass
class ClaimResult:
    queued: list[QueuedRun] = field(default_factory=list)
    # Jobs still active after the claim, at their next dispatch instant (for the heap).
    next_due: list[DueEntry] = field(default_factory=list)
    # Jobs changed between the read and the compare-and-set (an API edit or pause): nothing
    # was written for them; the engine reloads their rows.
    refused: list[uuid.UUID] = field(default_factory=list)
    claimed: int = 0
    missed: int = 0
    pending: int = 0
    deferred: int = 0
    fenced_out: FencedOut | None = None


@dataclass
class _Batch:
    """Rows for CLAIM_SQL, and what each job yields if the compare-and-set accepts it."""

    runs: list[tuple[Any, ...]] = field(default_factory=list)
    advance: list[tuple[Any, ...]] = field(default_factory=list)
    queued: dict[uuid.UUID, QueuedRun] = field(default_factory=dict)
    pending: set[uuid.UUID] = field(default_factory=set)
    missed: dict[uuid.UUID, int] = field(default_factory=dict)
    next_due: dict[uuid.UUID, DueEntry] = field(default_factory=dict)

    def params(self) -> list[str]:
        """CLAIM_SQL's parameters: one array literal per column, cast in SQL."""
        ids, nexts, lasts, statuses, expected, versions = _columns(self.advance, 6)
        (run_ids, job_ids, tenants, partitions, scheduled, triggers, states, due, attempts,
         epochs, dedup, queued_at, finished, errors, created) = _columns(self.runs, 15)  # fmt: skip
        return [
            uuid_array(ids), timestamp_array(nexts), timestamp_array(lasts),
            text_array(statuses), timestamp_array(expected), int_array(versions),
            uuid_array(run_ids), uuid_array(job_ids), int_array(tenants), int_array(partitions),
            timestamp_array(scheduled), text_array(triggers), text_array(states),
            timestamp_array(due), int_array(attempts), int_array(epochs), text_array(dedup),
            timestamp_array(queued_at), timestamp_array(finished), text_array(errors),
            timestamp_array(created),
        ]  # fmt: skip


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    # zip(*rows) transposes in C; a batch may hold no run at all (every firing skipped).
    return list(zip(*rows, strict=True)) if rows else [()] * width


def _tenant(row: Sequence[object]) -> int:
    tenant = row[1]
    assert isinstance(tenant, int)
    return tenant


def _jitter(row: Sequence[object]) -> timedelta:
    job_id, window = row[0], row[15]
    if isinstance(window, timedelta) and window and isinstance(job_id, uuid.UUID):
        return jitter_offset(job_id, window)
    return timedelta(0)


def _spec(row: Sequence[object]) -> ScheduleSpec:
    """jobs.services.jobs.schedule_spec, from a raw row: 50,000 model instances cost too much."""
    kind, cron, interval_s, anchor, run_at, tz = row[3], row[4], row[5], row[6], row[7], row[8]
    if kind == ScheduleKind.CRON:
        return ScheduleSpec(kind=ScheduleKind.CRON, cron=str(cron), timezone=str(tz))
    if kind == ScheduleKind.INTERVAL:
        assert isinstance(interval_s, int)
        assert isinstance(anchor, datetime)
        return ScheduleSpec(
            kind=ScheduleKind.INTERVAL,
            interval=timedelta(seconds=interval_s),
            anchor=anchor,
            timezone=str(tz),
        )
    assert isinstance(run_at, datetime)
    return ScheduleSpec(kind=ScheduleKind.ONCE, run_at=run_at, timezone=str(tz))


def _plan(
    spec: ScheduleSpec, row: Sequence[object], now: datetime
) -> tuple[tuple[datetime, ...], tuple[datetime, ...], int, datetime | None]:
    """(run instants, missed instants to record, missed count, next firing) for one job."""
    due = row[9]
    deadline = row[14]
    assert isinstance(due, datetime)
    assert deadline is None or isinstance(deadline, timedelta)
    following = next_fire_after(spec, due)
    on_time = deadline is None or now - due <= deadline
    if (following is None or following > now) and on_time:
        # The common case, one due firing on time: skip the catch-up arithmetic.
        return (due,), (), 0, following
    policy, limit = row[12], row[13]
    assert isinstance(limit, int)
    plan = plan_catch_up(
        spec,
        first_due=due,
        now=now,
        policy=CatchUpPolicy(str(policy)),
        starting_deadline=deadline,
        limit=limit,
    )
    return plan.run, plan.missed, plan.missed_count, plan.next_fire_at


def _add_job(batch: _Batch, row: Sequence[object], epoch: int, now: datetime) -> None:
    job_id, tenant_id, partition, due, version = row[0], row[1], row[2], row[9], row[16]
    assert isinstance(job_id, uuid.UUID)
    assert isinstance(partition, int)
    assert isinstance(due, datetime)
    offset = _jitter(row)
    runs, missed, missed_count, following = _plan(_spec(row), row, now)
    catch_up = len(runs) > 1 or missed_count > 0
    trigger = RunTrigger.CATCH_UP if catch_up else RunTrigger.SCHEDULE
    for instant in missed:
        key = dedup_key_for(job_id, instant)
        batch.runs.append((uuid.uuid4(), job_id, tenant_id, partition, instant, trigger,
                           RunState.MISSED, instant + offset, 0, epoch, key, None, now,
                           _MISSED_REASON, now))  # fmt: skip
    if missed_count:
        batch.missed[job_id] = missed_count
    for scheduled_for in runs:
        run_id, due_at = uuid.uuid4(), scheduled_for + offset
        # A jittered firing not yet due waits as a pending timer: never dispatch early (I5).
        state = RunState.QUEUED if due_at <= now else RunState.PENDING
        batch.runs.append((run_id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                           due_at, 1 if state == RunState.QUEUED else 0, epoch,
                           dedup_key_for(job_id, scheduled_for),
                           now if state == RunState.QUEUED else None, None, "", now))  # fmt: skip
        if state == RunState.QUEUED:
            queue, priority = row[10], row[11]
            assert isinstance(priority, int)
            batch.queued[run_id] = QueuedRun(run_id, 1, partition, str(queue), priority)
        else:
            batch.pending.add(run_id)
    last = max([*runs, *missed], default=due)
    if following is not None:
        batch.next_due[job_id] = DueEntry(following + offset, job_id, partition, _tenant(row))
    status = JobStatus.ACTIVE if following else JobStatus.COMPLETED
    batch.advance.append((job_id, following, last, status, due, version))


def claim_due_batch(
    entries: Sequence[DueEntry],
    *,
    epochs: Mapping[int, int],
    now: datetime,
    quotas: TenantAllowances | None = None,
    mono: float = 0.0,
) -> ClaimResult:
    """Claim the due firings of ``entries`` in one transaction.

    Invariant 3: the epoch check comes first and holds the partition rows locked to commit;
    entries of partitions whose epoch is no longer ours are not touched, and reported in
    ``fenced_out`` so that the engine drops those partitions and dispatches nothing for them.
    The due jobs are read without row locks and advanced by compare-and-set on (next_fire_at,
    version, status): a job changed in between is left alone and reported in ``refused``.
    """
    result = ClaimResult()
    wanted = {e.partition for e in entries if e.partition in epochs}
    with transaction.atomic():
        ours = fence({p: epochs[p] for p in wanted}, now=now)
        if ours != wanted:
            result.fenced_out = FencedOut(frozenset(wanted - ours))
        ids = [e.job_id for e in entries if e.partition in ours]
        if not ids:
            return result
        with server_cursor() as cursor:
            cursor.execute(DUE_JOBS_SQL, [uuid_array(ids), int_array(sorted(ours)), now])
            quotas = quotas if quotas is not None else TenantAllowances(refresh_s=0.0)
            rows = _within_quota(cursor, cursor.fetchall(), entries, result, now, quotas, mono)
            _claim_rows(cursor, rows, result, epochs, now)
    return result


def _within_quota(
    cursor: psycopg.Cursor[Any],
    rows: list[Sequence[object]],
    entries: Sequence[DueEntry],
    result: ClaimResult,
    now: datetime,
    quotas: TenantAllowances,
    mono: float,
) -> list[Sequence[object]]:
    """Rows whose tenant is below Tenant.max_queued_runs, in the batch's (fair) order; the
    others keep their next_fire_at (nothing is written for them) and are retried shortly."""
    order: dict[object, int] = {e.job_id: i for i, e in enumerate(entries)}
    rows.sort(key=lambda row: order.get(row[0], 0))
    allowances = quotas.current(cursor, (_tenant(row) for row in rows), mono)
    take, defer = within_allowance(rows, allowances, tenant_of=1)
    for row in take:
        quotas.consume(_tenant(row), 1)
    for row in defer:
        assert isinstance(row[0], uuid.UUID)
        assert isinstance(row[2], int)
        result.next_due.append(DueEntry(now + QUOTA_RETRY, row[0], row[2], _tenant(row)))
    result.deferred = len(defer)
    return take


def _claim_rows(
    cursor: psycopg.Cursor[Any],
    jobs: Sequence[Sequence[object]],
    result: ClaimResult,
    epochs: Mapping[int, int],
    now: datetime,
) -> None:
    batch = _Batch()
    for row in jobs:
        due = row[9]
        assert isinstance(due, datetime)
        partition = row[2]
        assert isinstance(partition, int)
        if due + _jitter(row) > now:
            # Moved earlier by an edit, but its jittered instant is still ahead of us.
            assert isinstance(row[0], uuid.UUID)
            result.next_due.append(DueEntry(due + _jitter(row), row[0], partition, _tenant(row)))
            continue
        _add_job(batch, row, epochs[partition], now)
    if not batch.advance:
        return
    cursor.execute(CLAIM_SQL, batch.params())
    advanced: set[uuid.UUID] = set()
    inserted: set[uuid.UUID] = set()
    for is_job, row_id in cursor.fetchall():
        (advanced if is_job else inserted).add(row_id)
    result.queued = [run for run_id, run in batch.queued.items() if run_id in inserted]
    result.pending = len(batch.pending & inserted)
    result.missed = sum(n for job, n in batch.missed.items() if job in advanced)
    result.next_due.extend(e for job, e in batch.next_due.items() if job in advanced)
    result.refused = [
        job for job in (r[0] for r in batch.advance)
        if isinstance(job, uuid.UUID) and job not in advanced
    ]  # fmt: skip
    result.claimed = len(advanced)
