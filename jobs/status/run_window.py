"""Runs due in a time window, read through an index: the FROM clause of the overview's reads.

No index of ``jobs_jobrun`` starts with ``scheduled_for``; the one that holds it is
run_job_history ``(job, -scheduled_for)``. Reading a window for all jobs therefore takes one
of two forms:

* **by job**: for each job in scope, one index range of run_job_history inside the window
  (a LATERAL join). Its cost is the number of jobs plus the runs in the window, whatever the
  length of the run history, which only grows.
* **by scan**: one pass over the runs with the window as a filter (a parallel sequential scan,
  or for one tenant a bitmap scan of run_tenant_state). Its cost is the whole history.

Every run belongs to a job (deleting a job deletes its runs), so both forms read the same
rows. The by-job form is taken for windows up to ``BY_JOB_MAX_WINDOW`` unless the jobs are so
many that one index probe each (about ``PROBE_PAGES`` pages) would read more than the whole
runs table, judged on the planner's own statistics in pg_class. A longer window holds so many
runs that fetching each from its index entry, at random, costs about as much as the scan
reads in order (bench/bench_status.py: 24 hours of 1,000,000 runs over 7 days), and for one
tenant the scan's bitmap of run_tenant_state also serves the filter on failed states.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

PROBE_PAGES = 4
BY_JOB_MAX_WINDOW = timedelta(hours=1)

_SIZES_SQL = """
SELECT (SELECT reltuples FROM pg_class WHERE oid = 'jobs_job'::regclass),
       (SELECT relpages FROM pg_class WHERE oid = 'jobs_jobrun'::regclass)
"""


@dataclass(frozen=True)
class RunsDue:
    """``sql`` is a parenthesised subquery of jobs_jobrun rows due in [since, until]."""

    sql: str
    params: list[Any]
    by_job: bool


def by_job_is_cheaper() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(_SIZES_SQL)
        row = cursor.fetchone()
    assert row is not None
    jobs, run_pages = float(row[0]), float(row[1])
    # reltuples is -1 for a table never analysed: too new to be large.
    return jobs < 0 or jobs * PROBE_PAGES < run_pages


def runs_due(
    *, since: datetime, until: datetime, tenant_id: int | None, by_job: bool | None = None
) -> RunsDue:
    if by_job is None:
        by_job = until - since <= BY_JOB_MAX_WINDOW and by_job_is_cheaper()
    tenant = " AND tenant_id = %s" if tenant_id is not None else ""
    extra = [tenant_id] if tenant_id is not None else []
    if by_job:
        sql = f"""(SELECT r.* FROM jobs_job j
          CROSS JOIN LATERAL (SELECT * FROM jobs_jobrun
                               WHERE job_id = j.id AND scheduled_for >= %s
                                 AND scheduled_for <= %s) r
         WHERE true{tenant.replace("tenant_id", "j.tenant_id")})"""
    else:
        sql = f"""(SELECT * FROM jobs_jobrun
         WHERE scheduled_for >= %s AND scheduled_for <= %s{tenant})"""
    return RunsDue(sql=sql, params=[since, until, *extra], by_job=by_job)
