"""Days of run history for the archive tests: partitions created, runs and attempts inserted in
bulk (the SQL twin of the run ids), and the lines PostgreSQL renders of them."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django.db import connection

from jobs import archive_format as fmt
from jobs.archive_format import day_bounds
from jobs.models import Job
from jobs.run_ids import day_id_range
from jobs.run_partitions import ATTEMPT_TABLE, RUN_TABLE, default_partition_name, partition_name
from jobs.services.history_partitions import partitions_ensure


def _day_rows(table: str, day: date, *, in_default: bool) -> str:
    """FROM-clause of the day's rows: its partition, or its id range of the default."""
    if not in_default:
        return partition_name(table, day)
    low, high = day_id_range(day)
    key = "id" if table == RUN_TABLE else "run_id"
    return (
        f"(SELECT * FROM {default_partition_name(table)}"
        f" WHERE {key} >= '{low}' AND {key} < '{high}')"
    )


def fill_day(
    job: Job, day: date, runs: int, *, state: str = "succeeded", in_default: bool = False
) -> None:
    """``runs`` finished runs of ``job`` on ``day``, spread over it, each with one attempt, with
    values that test the rendering: quotes, backslashes, non-ASCII, JSON. ``in_default``: the
    day gets no partition, its rows go to the default partitions."""
    if not in_default:
        partitions_ensure([day])
    start, _ = day_bounds(day)
    spacing_ms = 86_400_000 // (runs + 1)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                                     state, attempt, epoch, dedup_key, worker, cancel_requested,
                                     held_by, last_error, replayed_count, created_at, started_at,
                                     finished_at, lateness, start_lag, result, upstream_run_ids)
            SELECT jobs_run_id(t), %(job)s, %(tenant)s, 0, t, 'schedule', %(state)s, 1, 3,
                   md5(t::text), 'w1', false, '', 'boom "x" \\ caf\u00e9 ' || g, 0, t, t,
                   t + interval '2 seconds', interval '0.001234 seconds', interval '1.5 seconds',
                   jsonb_build_object('n', g, 'text', E'line\\nnext'), ARRAY[]::uuid[]
              FROM generate_series(1, %(runs)s) AS g,
                   LATERAL (SELECT %(start)s::timestamptz + g * %(spacing)s * interval '1 ms' AS t)
                   AS x
            """,
            {
                "job": job.id,
                "tenant": job.tenant_id,
                "state": state,
                "runs": runs,
                "start": start,
                "spacing": spacing_ms,
            },
        )
        cursor.execute(
            f"""
            INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, queued_at, started_at,
                                         finished_at, outcome, error)
            SELECT id, 1, 3, 'w1', scheduled_for, scheduled_for, finished_at, 'succeeded', ''
              FROM {_day_rows(RUN_TABLE, day, in_default=in_default)} AS r
            """
        )


def day_lines(day: date, *, in_default: bool = False) -> dict[str, set[str]]:
    """Every archive line of the day's runs and attempts, as PostgreSQL renders them now."""
    found = {}
    for schema, table in ((fmt.RUNS, RUN_TABLE), (fmt.ATTEMPTS, ATTEMPT_TABLE)):
        rows = _day_rows(table, day, in_default=in_default)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {schema.line_sql()} FROM {rows} AS t")
            found[schema.table] = {row[0] for row in cursor.fetchall()}
    return found


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cursor.fetchone()[0])


def ago(now: datetime, days: int) -> date:
    return (now - timedelta(days=days)).date()
