"""What the run history's partitions are read by, for the tests that hold a statement to its
partitions (docs/history.md, "Partitions"): each partition's scans in this transaction
(pg_stat_xact_user_tables), and dropping the day partitions a committing test created."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date

from django.db import connection

from jobs.run_partitions import ATTEMPT_TABLE, RUN_TABLE, partition_name


def partition_scans() -> dict[str, int]:
    """Scans of each history partition so far in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT relname, seq_scan + COALESCE(idx_scan, 0) FROM pg_stat_xact_user_tables
             WHERE relname LIKE 'jobs_jobrun_%' OR relname LIKE 'jobs_runattempt_%'
            """
        )
        return dict(cursor.fetchall())


def partitions_touched(action: Callable[[], object]) -> set[str]:
    """The history partitions ``action`` scanned."""
    before = partition_scans()
    action()
    return {name for name, n in partition_scans().items() if n > before.get(name, 0)}


def drop_day_partitions(days: Iterable[date]) -> None:
    """DDL outlives a test that commits: its days' partitions, detached and dropped."""
    with connection.cursor() as cursor:
        for day in days:
            for table in (ATTEMPT_TABLE, RUN_TABLE):
                # Detached first: the runs' partition is referenced by foreign keys.
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {partition_name(table, day)}")
                cursor.execute(f"DROP TABLE {partition_name(table, day)}")
