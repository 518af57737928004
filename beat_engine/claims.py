"""claim_due_batch: fence the epochs, lock due jobs, insert runs once, advance next_fire_at."""

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
from beat_engine.publisher import QueuedRun
from beat_engine.quotas import TenantAllowances, within_allowance
from beat_engine.schedules import ScheduleKind, ScheduleSpec, next_fire_after
from jobs.models import JobStatus, RunTrigger
from jobs.services.dedup import dedup_key_for
from jobs.states import RunState

# Row locks in id order: two claimers of one partition (a handover) never deadlock.
LOCK_DUE_JOBS_SQL = """
SELECT id, tenant_id, partition, kind, cron_expression, interval_seconds, anchor_at, run_at,
       timezone, next_fire_at, queue, priority, catchup_policy, catchup_limit,
       starting_deadline, jitter_window
  FROM jobs_job
 WHERE id = ANY(%s::uuid[]) AND partition = ANY(%s::int[])
   AND status = 'active' AND next_fire_at <= %s
 ORDER BY id
   FOR UPDATE
"""

# One statement for the whole batch. Invariant 2: the unique (job, scheduled_for) key makes a
# second claim of a firing a no-op, whoever races us.
INSERT_RUNS_SQL = """
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at,
                         attempt, epoch, dedup_key, queued_at, finished_at, last_error,
                         created_at, worker, cancel_requested, replayed_count)
SELECT u.*, '', false, 0
  FROM unnest(%s::uuid[], %s::uuid[], %s::bigint[], %s::int[], %s::timestamptz[], %s::text[],
              %s::text[], %s::timestamptz[], %s::int[], %s::bigint[], %s::text[],
              %s::timestamptz[], %s::timestamptz[], %s::text[], %s::timestamptz[]) AS u
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id
"""

ADVANCE_JOBS_SQL = """
UPDATE jobs_job j
   SET next_fire_at = u.next_fire_at, last_fire_at = u.last_fire_at, status = u.status
  FROM unnest(%s::uuid[], %s::timestamptz[], %s::timestamptz[], %s::text[])
       AS u(id, next_fire_at, last_fire_at, status)
 WHERE j.id = u.id
"""

# A job deferred because its tenant is at max_queued_runs is looked at again after this long.
QUOTA_RETRY = timedelta(seconds=1)

_MISSED_REASON = "missed: later than the job's starting deadline or skipped by catch-up"


@dataclass
class ClaimResult:
    queued: list[QueuedRun] = field(default_factory=list)
    # Jobs still active after the claim, at their next dispatch instant (for the heap).
    next_due: list[DueEntry] = field(default_factory=list)
    claimed: int = 0
    missed: int = 0
    pending: int = 0
    deferred: int = 0
    fenced_out: FencedOut | None = None


@dataclass
class _Rows:
    """Column arrays for INSERT_RUNS_SQL."""

    cols: list[list[object]] = field(default_factory=lambda: [[] for _ in range(15)])
    queued: dict[uuid.UUID, QueuedRun] = field(default_factory=dict)

    def add(self, values: Sequence[object]) -> None:
        for column, value in zip(self.cols, values, strict=True):
            column.append(value)


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


def _add_job(
    rows: _Rows, result: ClaimResult, row: Sequence[object], epoch: int, now: datetime
) -> tuple[datetime | None, datetime]:
    job_id, tenant_id, partition = row[0], row[1], row[2]
    assert isinstance(job_id, uuid.UUID)
    assert isinstance(partition, int)
    offset = _jitter(row)
    runs, missed, missed_count, following = _plan(_spec(row), row, now)
    catch_up = len(runs) > 1 or missed_count > 0
    trigger = RunTrigger.CATCH_UP if catch_up else RunTrigger.SCHEDULE
    for instant in missed:
        rows.add([uuid.uuid4(), job_id, tenant_id, partition, instant, trigger, RunState.MISSED,
                  instant + offset, 0, epoch, dedup_key_for(job_id, instant), None, now,
                  _MISSED_REASON, now])  # fmt: skip
    result.missed += missed_count
    for scheduled_for in runs:
        run_id, due_at = uuid.uuid4(), scheduled_for + offset
        # A jittered firing not yet due waits as a pending timer: never dispatch early (I5).
        state = RunState.QUEUED if due_at <= now else RunState.PENDING
        rows.add([run_id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at,
                  1 if state == RunState.QUEUED else 0, epoch,
                  dedup_key_for(job_id, scheduled_for), now if state == RunState.QUEUED else None,
                  None, "", now])  # fmt: skip
        if state == RunState.QUEUED:
            queue, priority = row[10], row[11]
            assert isinstance(priority, int)
            rows.queued[run_id] = QueuedRun(run_id, 1, partition, str(queue), priority)
        else:
            result.pending += 1
    last = max([*runs, *missed], default=row[9])
    assert isinstance(last, datetime)
    if following is not None:
        result.next_due.append(DueEntry(following + offset, job_id, partition, _tenant(row)))
    return following, last


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
            cursor.execute(LOCK_DUE_JOBS_SQL, [ids, sorted(ours), now])
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
    rows = _Rows()
    advance: tuple[list[object], list[object], list[object], list[object]] = ([], [], [], [])
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
        following, last = _add_job(rows, result, row, epochs[partition], now)
        for column, value in zip(
            advance,
            (row[0], following, last, JobStatus.ACTIVE if following else JobStatus.COMPLETED),
            strict=True,
        ):
            column.append(value)
    if not advance[0]:
        return
    cursor.execute(INSERT_RUNS_SQL, rows.cols)
    inserted = {row[0] for row in cursor.fetchall()}
    cursor.execute(ADVANCE_JOBS_SQL, list(advance))
    result.queued = [run for run_id, run in rows.queued.items() if run_id in inserted]
    result.claimed = len(advance[0])
