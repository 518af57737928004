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
from jobs.models_reasons import ReasonKind
from jobs.run_ids import run_id_for
from jobs.services.dedup import dedup_key_sql
from jobs.states import RunState

# A plain read: no row locks (FOR UPDATE wrote a lock into every due tuple, a second write of
# each row per claim). The compare-and-set in CLAIM_SQL refuses rows that changed since.
# Rows not yet due are read too: their entry was stale (the job moved later, its notification
# lost, or an entry given back after a failure), and the row says where it belongs now.
DUE_JOBS_SQL = """
SELECT id, tenant_id, partition, kind, cron_expression, interval_seconds, anchor_at, run_at,
       timezone, next_fire_at, queue, priority, catchup_policy, catchup_limit,
       starting_deadline, jitter_window, version
  FROM jobs_job
 WHERE id = ANY(%s::uuid[]) AND partition = ANY(%s::int[])
   AND status = 'active' AND next_fire_at IS NOT NULL
"""

# One statement for the whole batch. The UPDATE advances only jobs still as read (same
# next_fire_at and version, still active: an API edit or pause in between bumps the version
# and wins); runs are inserted only for the jobs it advanced. One run per firing
# (docs/architecture.md, Invariants): the unique (job, scheduled_for) key makes a second
# claim of a firing a no-op, whoever races us.
# Python sends only what varies per row; the run's tenant and partition come from the job
# row, its epoch from the fenced epochs, its dedup key and the columns that follow from its
# state are derived here (each text-array element parsed by the server cost as much as the
# row's insert, profiled).
CLAIM_SQL = f"""
WITH advanced AS (
    UPDATE jobs_job j
       SET next_fire_at = u.next_fire_at, last_fire_at = COALESCE(u.last_fire_at, u.expected_at),
           status = u.status
      FROM unnest(%(job_ids)s::uuid[], %(nexts)s::timestamptz[], %(lasts)s::timestamptz[],
                  %(statuses)s::text[], %(expected)s::timestamptz[], %(versions)s::int[])
           AS u(id, next_fire_at, last_fire_at, status, expected_at, expected_version)
     -- The batch's ids as one array probed by primary key, as well as joined: a job row is
     -- found by id whatever the statistics say. On a database whose jobs_job was never
     -- analyzed (registered in bulk less than an autovacuum pass ago), the planner's default
     -- estimate of status = 'active' (one row in 200) made it scan every job of the owned
     -- partitions and compare each with every id of the batch: 0.24-0.49 s for claims of
     -- 77-101 rows among 10,000 jobs (EXPLAIN ANALYZE), and a node fell behind 1,000 firings
     -- a second for good (docs/benchmarks.md, "A new database's first steady run").
     WHERE j.id = ANY(%(job_ids)s::uuid[]) AND j.id = u.id AND j.status = 'active'
       AND j.next_fire_at = u.expected_at AND j.version = u.expected_version
       AND j.partition = ANY(%(partitions)s::int[])
    RETURNING j.id, j.tenant_id, j.partition
), inserted AS (
    INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                             due_at, attempt, epoch, dedup_key, queued_at, finished_at,
                             last_error, created_at, worker, cancel_requested, replayed_count)
    SELECT r.id, r.job_id, a.tenant_id, a.partition, r.scheduled_for, r.trigger, r.state,
           r.scheduled_for + r.jitter_us * interval '1 microsecond',
           CASE r.state WHEN '{RunState.QUEUED.value}' THEN 1 ELSE 0 END, e.epoch,
           {dedup_key_sql("r.job_id", "r.scheduled_for")},
           -- A firing claimed ahead of its instant (docs/engine.md, "Claim ahead") is queued
           -- from the instant on: the sweep and the takeover read unpublished runs by it.
           CASE r.state WHEN '{RunState.QUEUED.value}'
                THEN GREATEST(%(now)s::timestamptz,
                              r.scheduled_for + r.jitter_us * interval '1 microsecond') END,
           CASE r.state WHEN '{RunState.MISSED.value}' THEN %(now)s::timestamptz END,
           CASE r.state WHEN '{RunState.MISSED.value}' THEN %(missed_reason)s ELSE '' END,
           %(now)s::timestamptz, '', false, 0
      FROM unnest(%(run_ids)s::uuid[], %(run_jobs)s::uuid[], %(scheduled)s::timestamptz[],
                  %(triggers)s::text[], %(states)s::text[], %(jitter_us)s::bigint[])
           AS r(id, job_id, scheduled_for, trigger, state, jitter_us)
      JOIN advanced a ON a.id = r.job_id
      JOIN unnest(%(partitions)s::int[], %(epochs)s::bigint[]) AS e(partition, epoch)
        ON e.partition = a.partition
    -- No conflict target: the unique firing key is a unique index of each day partition
    -- (docs/history.md, "Partitions"), which a target cannot name.
    ON CONFLICT DO NOTHING
    RETURNING id
), missed_ranges AS (
    -- Why the missed firings did not run: one row per job and catch-up with the range and the
    -- count, however many firings it skipped (docs/operations.md, "Reasons"). Empty arrays
    -- (the usual claim, nothing missed) cost the statement nothing measurable.
    INSERT INTO jobs_decisionreason (job_id, tenant_id, kind, first_at, last_at, count,
                                     recorded_at, updated_at, detail)
    SELECT m.job_id, a.tenant_id, '{ReasonKind.MISSED_CATCH_UP.value}', m.first_at, m.last_at,
           m.count, %(now)s::timestamptz, %(now)s::timestamptz, m.detail
      FROM unnest(%(miss_jobs)s::uuid[], %(miss_first)s::timestamptz[],
                  %(miss_last)s::timestamptz[], %(miss_counts)s::bigint[], %(miss_details)s::text[])
           AS m(job_id, first_at, last_at, count, detail)
      JOIN advanced a ON a.id = m.job_id
    ON CONFLICT (job_id, kind, first_at) DO NOTHING
)
SELECT true, id FROM advanced UNION ALL SELECT false, id FROM inserted
"""

# A job deferred because its tenant is at max_queued_runs is looked at again after this long.
QUOTA_RETRY = timedelta(seconds=1)

_MISSED_REASON = "missed: later than the job's starting deadline or skipped by catch-up"
_MICROSECOND = timedelta(microseconds=1)


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
    # (job, tenant, partition, firing instant) held back by the tenant limit, for the
    # engine's DeferralLog to record (aggregated, off the claim).
    deferred_firings: list[tuple[uuid.UUID, int, int, datetime]] = field(default_factory=list)
    fenced_out: FencedOut | None = None
    # The job of each run in ``queued``.
    job_of_run: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)


@dataclass
class _Batch:
    """Rows for CLAIM_SQL, and what each job yields if the compare-and-set accepts it."""

    # (run id, job id, scheduled_for, trigger, state, jitter in microseconds)
    runs: list[tuple[Any, ...]] = field(default_factory=list)
    # (job id, next_fire_at, last_fire_at or None for "the firing claimed", status,
    #  expected next_fire_at, expected version)
    advance: list[tuple[Any, ...]] = field(default_factory=list)
    queued: dict[uuid.UUID, QueuedRun] = field(default_factory=dict)
    pending: set[uuid.UUID] = field(default_factory=set)
    missed: dict[uuid.UUID, int] = field(default_factory=dict)
    # (job id, first missed, last missed, missed count, policy) for the missed_ranges CTE.
    missed_ranges: list[tuple[Any, ...]] = field(default_factory=list)
    next_due: dict[uuid.UUID, DueEntry] = field(default_factory=dict)
    partition_of: dict[uuid.UUID, int] = field(default_factory=dict)
    # The job of each queued run, for the engine to hold a run claimed ahead of its instant
    # together with its job's next firing.
    job_of_run: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)

    def columns(self) -> dict[str, object]:
        """CLAIM_SQL's per-row parameters: one array literal per column, cast in SQL. Built
        when the batch is prepared, off the thread that waits for the claim."""
        ids, nexts, lasts, statuses, expected, versions = _columns(self.advance, 6)
        run_ids, run_jobs, scheduled, triggers, states, jitter = _columns(self.runs, 6)
        m_jobs, m_first, m_last, m_counts, m_details = _columns(self.missed_ranges, 5)
        return {
            "job_ids": uuid_array(ids), "nexts": timestamp_array(nexts),
            "lasts": timestamp_array(lasts), "statuses": text_array(statuses),
            "expected": timestamp_array(expected), "versions": int_array(versions),
            "run_ids": uuid_array(run_ids), "run_jobs": uuid_array(run_jobs),
            "scheduled": timestamp_array(scheduled), "triggers": text_array(triggers),
            "states": text_array(states), "jitter_us": int_array(jitter),
            "miss_jobs": uuid_array(m_jobs), "miss_first": timestamp_array(m_first),
            "miss_last": timestamp_array(m_last), "miss_counts": int_array(m_counts),
            "miss_details": text_array(m_details),
        }  # fmt: skip


def _claim_params(
    columns: Mapping[str, object], epochs: Mapping[int, int], now: datetime
) -> dict[str, object]:
    parts = sorted(epochs)
    return {
        **columns,
        "partitions": int_array(parts),
        "epochs": int_array([epochs[p] for p in parts]),
        "now": now,
        "missed_reason": _MISSED_REASON,
    }


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    # zip(*rows) transposes in C; a batch may hold no run at all (every firing skipped).
    return list(zip(*rows, strict=True)) if rows else [()] * width


def _tenant(row: Sequence[object]) -> int:
    tenant = row[1]
    assert isinstance(tenant, int)
    return tenant


def _priority(row: Sequence[object]) -> int:
    priority = row[11]
    assert isinstance(priority, int)
    return priority


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


def _missed_detail(row: Sequence[object]) -> str:
    deadline = row[14]
    policy = f"catch-up policy {row[12]}"
    if isinstance(deadline, timedelta):
        return f"{policy}, starting deadline {deadline.total_seconds():g} s"
    return policy


def _add_job(batch: _Batch, row: Sequence[object], now: datetime) -> None:
    job_id, partition, due, version = row[0], row[2], row[9], row[16]
    assert isinstance(job_id, uuid.UUID)
    assert isinstance(partition, int)
    assert isinstance(due, datetime)
    offset = _jitter(row)
    jitter_us = offset // _MICROSECOND
    # A firing claimed ahead is planned as at its instant, as if claimed then: on time, one
    # run, queued (never started before it, docs/architecture.md, Invariants).
    now = max(now, due + offset)
    runs, missed, missed_count, following = _plan(_spec(row), row, now)
    catch_up = len(runs) > 1 or missed_count > 0
    trigger = RunTrigger.CATCH_UP if catch_up else RunTrigger.SCHEDULE
    for instant in missed:
        batch.runs.append(
            (run_id_for(instant), job_id, instant, trigger, RunState.MISSED, jitter_us)
        )
    if missed_count:
        batch.missed[job_id] = missed_count
        # Every policy runs the newest due firings, so the oldest missed is the due instant.
        batch.missed_ranges.append(
            (job_id, due, missed[-1] if missed else due, missed_count, _missed_detail(row))
        )
    queue, priority = str(row[10]), row[11]
    assert isinstance(priority, int)
    for scheduled_for in runs:
        run_id = run_id_for(scheduled_for)
        # A jittered firing not yet due waits as a pending timer: never early
        # (docs/architecture.md, Invariants).
        if scheduled_for + offset <= now:
            batch.runs.append((run_id, job_id, scheduled_for, trigger, RunState.QUEUED,
                               jitter_us))  # fmt: skip
            batch.queued[run_id] = QueuedRun(
                run_id, 1, partition, queue, priority, scheduled_for + offset, _tenant(row)
            )
            batch.job_of_run[run_id] = job_id
        else:
            batch.runs.append((run_id, job_id, scheduled_for, trigger, RunState.PENDING,
                               jitter_us))  # fmt: skip
            batch.pending.add(run_id)
    last = max([*runs, *missed], default=due)
    if following is not None:
        batch.next_due[job_id] = DueEntry(
            following + offset, job_id, partition, _tenant(row), fire_at=following,
            priority=priority,
        )  # fmt: skip
    status = JobStatus.ACTIVE if following else JobStatus.COMPLETED
    batch.partition_of[job_id] = partition
    # None stands for "the due instant" (the usual case): a NULL costs the server no parsing.
    batch.advance.append((job_id, following, None if last == due else last, status, due,
                          version))  # fmt: skip


@dataclass
class PreparedClaim:
    """A batch read and planned outside any transaction, for commit_claim to write."""

    batch: _Batch
    # Partitions whose rows were read, and what the read alone decided (deferred by quota,
    # not yet due): kept in the result whatever the commit finds.
    partitions: frozenset[int]
    result: ClaimResult
    columns: dict[str, object] = field(default_factory=dict)


def claim_due_batch(
    entries: Sequence[DueEntry],
    *,
    epochs: Mapping[int, int],
    now: datetime,
    quotas: TenantAllowances | None = None,
    mono: float = 0.0,
) -> ClaimResult:
    """Claim the due firings of ``entries``: prepare_claim, then commit_claim."""
    prepared = prepare_claim(entries, epochs=epochs, now=now, quotas=quotas, mono=mono)
    return commit_claim(prepared, epochs=epochs, now=now)


def prepare_claim(
    entries: Sequence[DueEntry],
    *,
    epochs: Mapping[int, int],
    now: datetime,
    quotas: TenantAllowances | None = None,
    mono: float = 0.0,
    until: datetime | None = None,
) -> PreparedClaim:
    """Read the due jobs of ``entries`` and plan their firings, without locks or a transaction.

    ``until``: claim ahead (docs/engine.md, "Claim ahead") the firings due by then, each
    planned as at its instant and queued from it; the engine pushes them at their instant.

    Nothing here needs to be current when the claim commits: commit_claim's compare-and-set
    on (next_fire_at, version, status) refuses every job that changed after this read, and its
    fence decides which partitions are still ours. That is what lets the engine prepare one
    batch on its own connection while the previous batch's claim runs in PostgreSQL.
    """
    result = ClaimResult()
    wanted = frozenset(e.partition for e in entries if e.partition in epochs)
    ids = [e.job_id for e in entries if e.partition in wanted]
    batch = _Batch()
    if ids:
        with server_cursor() as cursor:
            # Binary results: psycopg's C loaders, where Django's text timestamptz loader is
            # Python (two timestamps per row, a sixth of a spike's engine CPU, profiled).
            cursor.execute(DUE_JOBS_SQL, [uuid_array(ids), int_array(sorted(wanted))], binary=True)
            quotas = quotas if quotas is not None else TenantAllowances(refresh_s=0.0)
            rows = _due_rows(cursor.fetchall(), result, now if until is None else until)
            rows = _within_quota(cursor, rows, entries, result, now, quotas, mono)
        _plan_rows(batch, rows, now)
    return PreparedClaim(batch, wanted, result, batch.columns() if batch.advance else {})


def commit_claim(
    prepared: PreparedClaim, *, epochs: Mapping[int, int], now: datetime
) -> ClaimResult:
    """Write a prepared batch in one transaction and say what was claimed.

    No stale fence (docs/architecture.md, Invariants): the epoch check comes first and holds
    the partition rows locked to commit; jobs of partitions whose epoch is no longer ours are
    not touched, and those partitions are reported in ``fenced_out`` so that the engine drops
    them and dispatches nothing for them. Jobs changed since the read are left alone and
    reported in ``refused``.
    """
    result = prepared.result
    batch = prepared.batch
    with transaction.atomic():
        ours = fence({p: epochs[p] for p in prepared.partitions}, now=now)
        if ours != prepared.partitions:
            result.fenced_out = FencedOut(prepared.partitions - ours)
        if not batch.advance or not ours:
            return result
        with server_cursor() as cursor:
            params = _claim_params(prepared.columns, {p: epochs[p] for p in ours}, now)
            cursor.execute(CLAIM_SQL, params, binary=True)
            rows = cursor.fetchall()
    advanced: set[uuid.UUID] = set()
    inserted: set[uuid.UUID] = set()
    for is_job, row_id in rows:
        (advanced if is_job else inserted).add(row_id)
    result.queued = [run for run_id, run in batch.queued.items() if run_id in inserted]
    result.job_of_run = {run.run_id: batch.job_of_run[run.run_id] for run in result.queued}
    result.pending = len(batch.pending & inserted)
    result.missed = sum(n for job, n in batch.missed.items() if job in advanced)
    result.next_due.extend(e for job, e in batch.next_due.items() if job in advanced)
    result.refused = [
        job for job, partition in batch.partition_of.items()
        if partition in ours and job not in advanced
    ]  # fmt: skip
    result.claimed = len(advanced)
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
        assert isinstance(row[9], datetime)
        result.next_due.append(
            DueEntry(
                now + QUOTA_RETRY,
                row[0],
                row[2],
                _tenant(row),
                fire_at=row[9],
                priority=_priority(row),
            )
        )
        result.deferred_firings.append((row[0], _tenant(row), row[2], row[9]))
    result.deferred = len(defer)
    return take


def _due_rows(
    rows: list[Sequence[object]], result: ClaimResult, now: datetime
) -> list[Sequence[object]]:
    """Rows whose jittered instant is at or before ``now`` (the claim's instant, or the end
    of a claim ahead); the others go back to the heap at the instant their row says (before
    the tenant limits, which count only what is claimed)."""
    due_rows: list[Sequence[object]] = []
    for row in rows:
        due = row[9]
        assert isinstance(due, datetime)
        if due + _jitter(row) <= now:
            due_rows.append(row)
            continue
        # The entry was early: the job moved later (an edit whose notification was lost, an
        # entry given back after a failure), or its jittered instant is still ahead of us.
        assert isinstance(row[0], uuid.UUID)
        assert isinstance(row[2], int)
        result.next_due.append(
            DueEntry(
                due + _jitter(row),
                row[0],
                row[2],
                _tenant(row),
                fire_at=due,
                priority=_priority(row),
            )
        )
    return due_rows


def _plan_rows(batch: _Batch, jobs: Sequence[Sequence[object]], now: datetime) -> None:
    for row in jobs:
        _add_job(batch, row, now)
