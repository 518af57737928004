"""Runs due in a time window, read through an index: the FROM clause of the overview's reads.

The index these reads use is each run partition's unique firing index ``(job,
scheduled_for)`` (jobs/run_partitions.py), which leads with the job. Reading a window for all
jobs therefore takes one of two forms:

* **by job**: for each job in scope, one index range of the firing index inside the window
  (a LATERAL join). Its cost is the number of jobs plus the runs in the window, whatever the
  length of the run history, which only grows.
* **by scan**: one pass over the runs with the window as a filter (a parallel sequential scan,
  or for one tenant a bitmap scan of run_tenant_state). Its cost is the whole history.

Every run belongs to a job (deleting a job deletes its runs), so both forms read the same
rows. The by-job form is taken when one index probe per job (about ``PROBE_PAGES`` pages) plus
one page per run in the window costs less than reading every page of the runs table, judged on
the planner's own statistics: the table sizes in pg_class, and the window's rows as the
planner estimates them from scheduled_for's histogram. So the last hour is read by job as
soon as the history outweighs the jobs, and a day once the history is a few weeks long (on
1,000,000 runs over 7 days, a day read by job and the scan cost about the same:
bench/bench_status.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

PROBE_PAGES = 4

# The runs table is partitioned (docs/history.md, "Partitions"): its pages are its partitions'.
_SIZES_SQL = """
SELECT (SELECT reltuples FROM pg_class WHERE oid = 'jobs_job'::regclass),
       (SELECT COALESCE(sum(c.relpages), 0) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'jobs_jobrun'::regclass)
"""


# The planner's estimate of the rows due in a window, from scheduled_for's statistics.
_WINDOW_ROWS_SQL = (
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs_jobrun"
    " WHERE scheduled_for >= %s AND scheduled_for <= %s"
)


@dataclass(frozen=True)
class RunsDue:
    """``sql`` is a parenthesised subquery of jobs_jobrun rows due in [since, until]."""

    sql: str
    params: list[Any]
    by_job: bool


def by_job_is_cheaper(*, since: datetime, until: datetime) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(_SIZES_SQL)
        row = cursor.fetchone()
        assert row is not None
        jobs, run_pages = float(row[0]), float(row[1])
        # reltuples is -1 for a table never analysed: too new to be large.
        if jobs < 0:
            return True
        cursor.execute(_WINDOW_ROWS_SQL, [since, until])
        plan = cursor.fetchone()
    assert plan is not None
    explained = json.loads(plan[0]) if isinstance(plan[0], str) else plan[0]
    window_rows = float(explained[0]["Plan"]["Plan Rows"])
    return jobs * PROBE_PAGES + window_rows < run_pages


def runs_due(
    *, since: datetime, until: datetime, tenant_id: int | None, by_job: bool | None = None
) -> RunsDue:
    if by_job is None:
        by_job = by_job_is_cheaper(since=since, until=until)
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
