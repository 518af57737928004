"""Creating the run history's day partitions ahead of need and on demand (docs/history.md,
"Partitions"; names and DDL in jobs/run_partitions.py).

Every change of the layout takes ``LAYOUT_LOCK_KEY`` (a transaction advisory lock) and then
looks at the catalogue, so two nodes creating the same day at once create it once: the second
waits for the first's commit and finds the table. Each day is its own short transaction with a
lock timeout: ATTACH locks the default partition exclusively, and a day that cannot get it now
(a long statement reading every partition) is left for the next pass instead of queueing the
claims behind it.

A day whose rows are already in the default partition (a firing far ahead, a backfill past
the on-demand cap) is not created: PostgreSQL would refuse to attach it, and its rows are
correct where they are (the default's unique index covers them). It is reported, logged and
counted, and stays in the default.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta

from django.db import OperationalError, connection, transaction

from jobs.metrics import HISTORY_PARTITION_DAYS
from jobs.run_ids import day_id_range
from jobs.run_partitions import (
    FIRST_DAY,
    LAYOUT_LOCK_KEY,
    TABLES,
    create_day_partition_sql,
    default_partition_name,
    parse_partition_name,
    partition_name,
)

logger = logging.getLogger("jobs")

LOCK_TIMEOUT_MS = 2000

# A bulk insert (a backfill) creates the partitions of at most this many of its days; the
# others go to the default partition (a backfill of years would otherwise create a table per
# day of them).
ON_DEMAND_MAX_DAYS = 92


@dataclass
class EnsureReport:
    created: list[date] = field(default_factory=list)
    # Days whose rows are in the default partition, left there.
    in_default: list[date] = field(default_factory=list)
    # Days that could not get their locks within LOCK_TIMEOUT_MS; the next pass retries.
    busy: list[date] = field(default_factory=list)


def partition_days(table: str) -> set[date]:
    """The days ``table`` has a partition for (attached), from the catalogue."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = %s::regclass
            """,
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {parsed[1] for parsed in map(parse_partition_name, names) if parsed is not None}


def _exists(cursor: object, name: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])  # type: ignore[attr-defined]
    return bool(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _default_holds(cursor: object, table: str, day: date) -> bool:
    key = "id" if table == TABLES[0] else "run_id"
    low, high = day_id_range(day)
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT EXISTS (SELECT 1 FROM {default_partition_name(table)} "
        f"WHERE {key} >= %s AND {key} < %s)",
        [low, high],
    )
    return bool(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _ensure_day(day: date, lock_timeout_ms: int) -> str:
    """'created', 'exists', 'in_default' or 'busy' for one day, both tables, one transaction."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LAYOUT_LOCK_KEY])
            missing = [t for t in TABLES if not _exists(cursor, partition_name(t, day))]
            if not missing:
                return "exists"
            if any(_default_holds(cursor, table, day) for table in missing):
                return "in_default"
            for table in missing:  # runs before attempts (TABLES' order)
                for statement in create_day_partition_sql(table, day):
                    cursor.execute(statement)
            return "created"
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            return "busy"
        raise


def partitions_ensure(
    days: Iterable[date], *, lock_timeout_ms: int = LOCK_TIMEOUT_MS
) -> EnsureReport:
    """Create the partitions of ``days`` (both tables) that do not exist yet; idempotent."""
    report = EnsureReport()
    wanted = sorted({day for day in days if day >= FIRST_DAY})
    have = partition_days(TABLES[0]) & partition_days(TABLES[1])
    for day in wanted:
        if day in have:
            continue
        outcome = _ensure_day(day, lock_timeout_ms)
        if outcome == "created":
            report.created.append(day)
        elif outcome == "in_default":
            report.in_default.append(day)
        elif outcome == "busy":
            report.busy.append(day)
    for outcome, listed in (("created", report.created), ("in_default", report.in_default)):
        if listed:
            HISTORY_PARTITION_DAYS.labels(outcome=outcome).inc(len(listed))
    if report.in_default:
        logger.warning(
            "history.partition_day_in_default",
            extra={"days": [day.isoformat() for day in report.in_default]},
        )
    if report.busy:
        logger.info(
            "history.partition_busy", extra={"days": [day.isoformat() for day in report.busy]}
        )
    return report


def partitions_ensure_ahead(today: date, ahead_days: int) -> EnsureReport:
    """Today's partitions and those of the next ``ahead_days`` days (the history duty)."""
    return partitions_ensure(today + timedelta(days=n) for n in range(ahead_days + 1))


def partitions_ensure_for(days: Iterable[date]) -> EnsureReport:
    """On demand, before a bulk insert into known days: at most ON_DEMAND_MAX_DAYS of them,
    the latest first (the rest go to the default partition, which never refuses a row)."""
    chosen = sorted(set(days), reverse=True)[:ON_DEMAND_MAX_DAYS]
    return partitions_ensure(chosen)
