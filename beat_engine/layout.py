"""The partition layout: how many partitions the jobs are spread over, recorded in PostgreSQL.

A job's partition is ``partition_for(id, SCHEDULER_PARTITIONS)``, fixed when it is created.
Engines own partitions ``0 .. SCHEDULER_PARTITIONS - 1`` only, so after a change of the
setting the jobs in higher partitions were never fired, silently. The layout is recorded as
the set of ``PartitionEpoch`` rows, which is ``0 .. P - 1`` for a layout of P partitions
(rows created with epoch 0 when the layout is recorded; epochs themselves are issued by
``fencing.epoch_take``). An engine starts only when the layout matches its setting
(``layout_ensure``); ``repartition_jobs`` moves every job and its runs to a new layout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from beat_engine.partitions import partition_for

# pg_advisory_lock key ("sched-lay"): an engine checking the layout waits for a repartition
# in progress, so it never starts between the jobs moving and the layout being recorded.
LAYOUT_LOCK_KEY = 0x73636865642D6C61

_ROWS_SQL = "SELECT partition FROM jobs_partitionepoch ORDER BY partition"
# The partial index job_due_keyset serves this: one index probe, not a scan.
_HIGHEST_ACTIVE_SQL = "SELECT max(partition) FROM jobs_job WHERE status = 'active'"
_HIGHEST_EPOCH_SQL = "SELECT coalesce(max(epoch), 0) FROM jobs_partitionepoch"
# New rows start at the highest epoch ever issued (read before rows beyond the layout are
# deleted): no epoch issued later is lower than one issued before, for any partition (no
# stale fence, docs/architecture.md, Invariants).
_RECORD_SQL = """
INSERT INTO jobs_partitionepoch (partition, epoch, owner, updated_at)
SELECT p, %s, '', NULL FROM generate_series(0, %s - 1) AS p
ON CONFLICT (partition) DO NOTHING
"""
_JOBS_PAGE_SQL = "SELECT id FROM jobs_job WHERE id > %s ORDER BY id LIMIT %s"
_MOVE_JOBS_SQL = """
UPDATE jobs_job j SET partition = u.partition
  FROM unnest(%s::uuid[], %s::int[]) AS u(id, partition)
 WHERE j.id = u.id AND j.partition <> u.partition
"""
# Every run, finished ones included: a dead run replayed later is fired by its partition.
_MOVE_RUNS_SQL = """
UPDATE jobs_jobrun r SET partition = u.partition
  FROM unnest(%s::uuid[], %s::int[]) AS u(job_id, partition)
 WHERE r.job_id = u.job_id AND r.partition <> u.partition
"""


class LayoutMismatch(Exception):
    """The engine's SCHEDULER_PARTITIONS is not the layout the jobs are in."""


def _advice(partitions: int) -> str:
    return (
        f"Stop every beat engine, then run `manage.py repartition_jobs --partitions "
        f"{partitions}` to move the jobs to {partitions} partitions, or set "
        f"SCHEDULER_PARTITIONS back."
    )


def layout_problem(partitions: int) -> str | None:
    """Why an engine with ``partitions`` must not start, or None when the layout matches."""
    with connection.cursor() as cursor:
        cursor.execute(_ROWS_SQL)
        rows = [int(row[0]) for row in cursor.fetchall()]
        cursor.execute(_HIGHEST_ACTIVE_SQL)
        (highest,) = cursor.fetchone() or (None,)
    if rows and rows != list(range(partitions)):
        recorded = f"{max(rows) + 1}" if rows == list(range(max(rows) + 1)) else "another"
        return (
            f"SCHEDULER_PARTITIONS is {partitions}, but the jobs are spread over {recorded} "
            f"partitions (jobs_partitionepoch holds partitions {rows[0]}..{rows[-1]}); "
            f"jobs outside this node's partitions would never fire. {_advice(partitions)}"
        )
    if highest is not None and highest >= partitions:
        return (
            f"SCHEDULER_PARTITIONS is {partitions}, but active jobs are in partitions up to "
            f"{highest}, which no engine would fire. {_advice(partitions)}"
        )
    return None


def layout_ensure(partitions: int) -> None:
    """Record the layout on first start; raise LayoutMismatch when it is not ``partitions``."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LAYOUT_LOCK_KEY])
        problem = layout_problem(partitions)
        if problem is not None:
            raise LayoutMismatch(problem)
        _record(cursor, partitions)


@dataclass
class Repartitioned:
    jobs_seen: int = 0
    jobs_moved: int = 0
    runs_moved: int = 0


def jobs_repartition(
    partitions: int,
    *,
    batch: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> Repartitioned:
    """Move every job, and its runs, to ``partition_for(id, partitions)``, a batch per
    transaction, then record the layout. Run with every engine stopped: an engine claiming
    while jobs move would miss those moved away from its partitions until it restarts.
    Interrupted, it can be run again: it moves only what is not in place yet, and the layout
    is recorded last, so engines refuse to start until it has finished."""
    if partitions < 1:
        raise ValueError("partitions must be positive")
    done = Repartitioned()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LAYOUT_LOCK_KEY])
        (locked,) = cursor.fetchone() or (False,)
        if not locked:
            raise LayoutMismatch("another repartition_jobs is running")
        try:
            last = uuid.UUID(int=0)
            while True:
                cursor.execute(_JOBS_PAGE_SQL, [last, batch])
                ids = [row[0] for row in cursor.fetchall()]
                if not ids:
                    break
                _move(cursor, ids, partitions, done)
                last = ids[-1]
                done.jobs_seen += len(ids)
                if progress is not None:
                    progress(done.jobs_seen)
            with transaction.atomic():
                _record(cursor, partitions)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LAYOUT_LOCK_KEY])
    return done


def _record(cursor: CursorWrapper, partitions: int) -> None:
    """Make the PartitionEpoch rows exactly 0 .. partitions - 1."""
    cursor.execute(_HIGHEST_EPOCH_SQL)
    (floor,) = cursor.fetchone() or (0,)
    cursor.execute("DELETE FROM jobs_partitionepoch WHERE partition >= %s", [partitions])
    cursor.execute(_RECORD_SQL, [floor, partitions])


def _move(
    cursor: CursorWrapper, ids: list[uuid.UUID], partitions: int, done: Repartitioned
) -> None:
    parts = [partition_for(job_id, partitions) for job_id in ids]
    with transaction.atomic():
        cursor.execute(_MOVE_JOBS_SQL, [ids, parts])
        done.jobs_moved += cursor.rowcount
        cursor.execute(_MOVE_RUNS_SQL, [ids, parts])
        done.runs_moved += cursor.rowcount
