"""The overview's numbers, each one SQL statement bounded by time.

Every statement reads runs by ``scheduled_for`` inside a window that ends at the database's
clock (the last hour, at most the last 24 hours), through an index where the data allows it
(jobs/status/run_window.py), and runs under a statement timeout so that a slow read empties
one panel instead of holding the page.
Per-minute buckets are cut by ``date_bin`` in PostgreSQL, so only 60 rows per series leave
the database. docs/status.md lists what each panel counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import DatabaseError, connection, transaction

from jobs.models import JobRun
from jobs.states import RunState
from jobs.status.run_window import runs_due

T = TypeVar("T")

HOUR = timedelta(hours=1)
DAY = timedelta(hours=24)
MINUTE = timedelta(minutes=1)
STATEMENT_TIMEOUT_MS = 5000
FAILURES_SHOWN = 10
FAILED_STATES = (RunState.FAILED.value, RunState.DEAD.value)


@dataclass(frozen=True)
class Window:
    """The last hour in whole minutes: ``start`` is 59 minutes before ``now``'s minute."""

    now: datetime
    start: datetime

    @classmethod
    def ending(cls, now: datetime) -> Window:
        minute = now.replace(second=0, microsecond=0)
        return cls(now=now, start=minute - 59 * MINUTE)

    @property
    def minutes(self) -> list[datetime]:
        return [self.start + i * MINUTE for i in range(60)]

    def seconds_in(self, minute: datetime) -> float:
        """How much of a bucket has passed: 60, except for the current minute."""
        return max(min((self.now - minute).total_seconds(), 60.0), 1.0)


@dataclass(frozen=True)
class MinuteFigures:
    firings: int
    # Seconds; None when no run of that minute has been published (started) yet.
    publish_p50: float | None
    publish_p99: float | None
    start_p50: float | None
    start_p99: float | None


def _tenant_clause(tenant_id: int | None, column: str = "tenant_id") -> tuple[str, list[Any]]:
    return (f" AND {column} = %s", [tenant_id]) if tenant_id is not None else ("", [])


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@contextmanager
def _timeout() -> Iterator[None]:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = %s", [STATEMENT_TIMEOUT_MS])
        yield


def bounded(read: Callable[[], T]) -> T | None:
    """Run one panel's read under the statement timeout; None if it failed or took too long."""
    try:
        with _timeout():
            return read()
    except DatabaseError:
        return None


def firings_and_lateness(window: Window, *, tenant_id: int | None) -> dict[datetime, MinuteFigures]:
    """Runs per minute of their firing instant, and the p50/p99 of their publish lag
    (``lateness``: due to in the broker) and start lag (due to started)."""
    runs = runs_due(since=window.start, until=window.now, tenant_id=tenant_id)
    rows = _rows(
        f"""
        SELECT date_bin('1 minute', r.scheduled_for, %s) AS minute, count(*),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.lateness)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.lateness)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.start_lag)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.start_lag))
          FROM {runs.sql} r
         GROUP BY 1
        """,
        [window.start, *runs.params],
    )
    return {
        row[0]: MinuteFigures(int(row[1]), *(None if v is None else float(v) for v in row[2:]))
        for row in rows
    }


def runs_by_state(window: Window, *, tenant_id: int | None) -> list[tuple[str, int, int]]:
    """(state, runs due in the last hour, runs due in the last 24 hours), in state order."""
    runs = runs_due(since=window.now - DAY, until=window.now, tenant_id=tenant_id)
    rows = _rows(
        f"""
        SELECT r.state, count(*) FILTER (WHERE r.scheduled_for >= %s), count(*)
          FROM {runs.sql} r
         GROUP BY r.state
        """,
        [window.now - HOUR, *runs.params],
    )
    counts = {state: (int(hour), int(day)) for state, hour, day in rows}
    return [(state, *counts[state]) for state in RunState.values if state in counts]


def retries_per_minute(window: Window, *, tenant_id: int | None) -> dict[datetime, int]:
    """Attempts after the first queued in each minute, of runs due in the last 24 hours.

    The retried runs of the window are found first (materialized: left to itself the planner
    scans every attempt ever made, bench/bench_status.py), then their attempts through
    attempt_unique_per_run (run, attempt)."""
    runs = runs_due(since=window.now - DAY, until=window.now, tenant_id=tenant_id)
    rows = _rows(
        f"""
        WITH retried AS MATERIALIZED (SELECT r.id FROM {runs.sql} r WHERE r.attempt >= 2)
        SELECT date_bin('1 minute', a.queued_at, %s), count(*)
          FROM retried r
          JOIN LATERAL (SELECT queued_at FROM jobs_runattempt
                         WHERE run_id = r.id AND attempt >= 2
                           AND queued_at >= %s AND queued_at <= %s) a ON true
         GROUP BY 1
        """,
        [*runs.params, window.start, window.start, window.now],
    )
    return {minute: int(count) for minute, count in rows}


def dead_letters_per_minute(window: Window, *, tenant_id: int | None) -> dict[datetime, int]:
    """Runs moved to the dead letters in each minute, read per tenant through
    dead_letter_tenant_moved (tenant, -moved_at): one index range per tenant."""
    clause, extra = _tenant_clause(tenant_id, "t.id")
    rows = _rows(
        f"""
        SELECT date_bin('1 minute', d.moved_at, %s), count(*)
          FROM jobs_tenant t
          JOIN LATERAL (SELECT moved_at FROM jobs_deadletter
                         WHERE tenant_id = t.id AND moved_at >= %s AND moved_at <= %s) d ON true
         WHERE true{clause}
         GROUP BY 1
        """,
        [window.start, window.start, window.now, *extra],
    )
    return {minute: int(count) for minute, count in rows}


def latest_failures(window: Window, *, tenant_id: int | None) -> list[JobRun]:
    """The newest failed or dead-lettered runs due in the last 24 hours.

    Read per tenant through run_tenant_state (tenant, state): the cost is the tenant's failed
    runs, not its whole history; the newest few of each tenant are then merged."""
    clause, extra = _tenant_clause(tenant_id, "t.id")
    day = [list(FAILED_STATES), window.now - DAY, window.now, FAILURES_SHOWN]
    ids = [
        row[0]
        for row in _rows(
            f"""
            SELECT f.id FROM jobs_tenant t
              CROSS JOIN LATERAL (
                    SELECT id, finished_at, scheduled_for FROM jobs_jobrun
                     WHERE tenant_id = t.id AND state = ANY(%s)
                       AND scheduled_for >= %s AND scheduled_for <= %s
                     ORDER BY finished_at DESC NULLS LAST, scheduled_for DESC
                     LIMIT %s) f
             WHERE true{clause}
             ORDER BY f.finished_at DESC NULLS LAST, f.scheduled_for DESC
             LIMIT %s
            """,
            [*day, *extra, FAILURES_SHOWN],
        )
    ]
    found = JobRun.objects.select_related("job", "tenant").in_bulk(ids)
    return [found[run_id] for run_id in ids if run_id in found]
