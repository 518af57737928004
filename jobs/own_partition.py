"""The worker's writes of one run, addressed to the run's own day partitions.

A worker's start, heartbeat and outcome statements are prepared with generic plans
(jobs/prepared.py), in which the run id is a parameter: PostgreSQL prunes the runs and attempts
tables to the run's own partition only at execution, after it has locked and set up every day
partition of both (33 in a deployment holding 30 hot days), for each statement. Addressed to
the day partitions themselves, a statement locks and sets up one table of each
(docs/execution.md, "What each write of a run costs PostgreSQL", has the figures).

The run id carries its day (jobs/run_ids.py), so the partitions' names are known without a
lookup. A statement is addressed to them only when both hold:

* **the day is well inside the hot window**: at least ``MARGIN_DAYS`` after its first day
  (jobs/services/run_archive.py, ``hot_cutoff``). The archive detaches only days before that
  first day (its ``--before`` may not be later), and a detached partition keeps its name while
  it is exported: a statement addressed to it by name would write a table that is no longer
  the run history. Each statement is checked against its own instant, so the margin only has
  to cover the moment between the check and the statement and any difference between the
  worker's reading of the database clock and the archive's: two days is far more than either;
* **the day's partitions exist**, attached to both tables. Days whose rows are in the default
  partition have none (jobs/services/history_partitions.py). The process keeps the set of
  days it saw attached and reads the catalogue again, at most every ``REFRESH_S``, when a day
  is not in it.

A statement addressed to the partitions that matches no row is repeated on the parent tables,
so a run that is somewhere else is still found, and a stale delivery costs one more statement.
A partition dropped since the set was read fails the statement, which is then repeated on the
parent tables. Inside a transaction a failure would end the transaction, so there the parent
tables are always used.

Statements name the tables with the tokens ``{runs}`` and ``{attempts}``.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import ProgrammingError, connection
from psycopg import errors as pg_errors

from jobs import prepared
from jobs.run_ids import run_id_day
from jobs.run_partitions import ATTEMPT_TABLE, RUN_TABLE, parse_partition_name, partition_name

# A write of a run is addressed to its partitions only when the run's day is at least this many
# days after the hot window's first day at the write's own instant: the archive, which detaches
# only days before that first day, cannot reach the day before the statement has run.
MARGIN_DAYS = 2
# How often at most the catalogue is read again for a day not seen attached.
REFRESH_S = 60.0

RUNS_TOKEN = "{runs}"
ATTEMPTS_TOKEN = "{attempts}"


@dataclass(frozen=True)
class Tables:
    runs: str
    attempts: str

    def address(self, template: str) -> str:
        return template.replace(RUNS_TOKEN, self.runs).replace(ATTEMPTS_TOKEN, self.attempts)


PARENTS = Tables(RUN_TABLE, ATTEMPT_TABLE)


def addressable(day: date, *, now: datetime, hot_days: int) -> bool:
    """Whether a run of ``day`` may be written through its day partitions at ``now``."""
    first_hot_day = (now - timedelta(days=hot_days)).date()
    return day >= first_hot_day + timedelta(days=MARGIN_DAYS)


class AttachedDays:
    """The days both history tables had a partition for, as last read from the catalogue."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._days: frozenset[date] = frozenset()
        self._read_at: float | None = None

    def has(self, day: date) -> bool:
        if day in self._days:
            return True
        with self._lock:
            due = self._read_at is None or time.monotonic() - self._read_at >= self._refresh_s
            if due:
                self._read_at = time.monotonic()
        if due:
            self._days = frozenset(_attached_days())
        return day in self._days

    def reload(self) -> None:
        """Read the catalogue now."""
        with self._lock:
            self._read_at = time.monotonic()
        self._days = frozenset(_attached_days())

    def forget(self) -> None:
        """Read the catalogue again at the next look (a partition was found gone)."""
        with self._lock:
            self._days = frozenset()
            self._read_at = None


def _attached_days() -> set[date]:
    """The days both tables have a partition attached for, in one read of the catalogue."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
             WHERE i.inhparent = ANY(ARRAY[%s, %s]::regclass[])
            """,
            [RUN_TABLE, ATTEMPT_TABLE],
        )
        names = [row[0] for row in cursor.fetchall()]
    found: dict[str, set[date]] = {RUN_TABLE: set(), ATTEMPT_TABLE: set()}
    for parsed in map(parse_partition_name, names):
        if parsed is not None:
            found[parsed[0]].add(parsed[1])
    return found[RUN_TABLE] & found[ATTEMPT_TABLE]


_attached = AttachedDays()


def reload_attached_days() -> None:
    """Read the days with partitions now (a worker does at most once a minute, not per run)."""
    _attached.reload()


def tables_for(run_id: uuid.UUID, now: datetime) -> Tables:
    """The tables a write of ``run_id`` at ``now`` is addressed to."""
    if connection.in_atomic_block:
        return PARENTS
    day = run_id_day(run_id)
    if not addressable(day, now=now, hot_days=settings.SCHEDULER["HISTORY_HOT_DAYS"]):
        return PARENTS
    if not _attached.has(day):
        return PARENTS
    return _day_tables(day)


@functools.lru_cache(maxsize=64)
def _day_tables(day: date) -> Tables:
    # Formatting the names was 2% of a worker's CPU under py-spy, three statements a run.
    return Tables(partition_name(RUN_TABLE, day), partition_name(ATTEMPT_TABLE, day))


def fetch_one(
    template: str, params: Mapping[str, Any], *, run_id: uuid.UUID, now: datetime
) -> Sequence[Any] | None:
    """The first row of ``template`` run as prepared.fetch_one runs it, addressed to the run's
    day partitions when it can be, else (or when that matched nothing) to the parent tables."""
    tables = tables_for(run_id, now)
    if tables != PARENTS:
        try:
            row = prepared.fetch_one(tables.address(template), params)
        except ProgrammingError as exc:
            if not isinstance(exc.__cause__, pg_errors.UndefinedTable):
                raise
            _attached.forget()
        else:
            if row is not None:
                return row
    return prepared.fetch_one(PARENTS.address(template), params)
