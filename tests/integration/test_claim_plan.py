"""The claim reads only its batch's job rows, whatever PostgreSQL's statistics say.

A database whose jobs were registered in bulk less than an autovacuum pass ago has no
statistics for jobs_job. The claim's plan must not depend on them: with the planner's default
estimates it once scanned every job of the owned partitions for each row of the batch (0.24-0.49 s
for claims of about 100 rows among 10,000 jobs), and a node fell behind a steady stream for good.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction

from beat_engine.claims import CLAIM_SQL, _claim_params, prepare_claim
from beat_engine.fencing import epoch_take, server_cursor
from beat_engine.heap import DueEntry
from jobs.models import Job
from tests.support.factories import T0, job_factory
from tests.support.plans import copy_job, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

JOBS = 5_000
BATCH = 100

# As on a database never analyzed: no column statistics, no row count. Catalog writes are
# transactional: the test's rollback restores them, and autovacuum cannot analyze the table
# in between (it waits for these rows' locks).
_FORGET_STATISTICS_SQL = """
DELETE FROM pg_statistic WHERE starelid = 'jobs_job'::regclass;
UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = 'jobs_job'::regclass;
"""


@pytest.mark.parametrize("statistics", ["analyzed", "never analyzed"])
def test_the_claim_reads_only_its_batch_of_jobs(statistics: str) -> None:
    template = job_factory(interval=timedelta(seconds=10))
    # Every job of the one partition: copies of the template.
    copy_job(template.id, JOBS - 1)
    jobs = list(Job.objects.filter(partition=template.partition).values_list("id", "next_fire_at"))
    assert len(jobs) == JOBS
    epochs = {template.partition: epoch_take(partition=template.partition, node="n", now=T0)}
    now = T0 + timedelta(seconds=10)
    due = [DueEntry(at, job_id, template.partition) for job_id, at in jobs[:BATCH]]

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "ANALYZE jobs_job" if statistics == "analyzed" else _FORGET_STATISTICS_SQL
            )
        prepared = prepare_claim(due, epochs=epochs, now=now)
        with server_cursor() as cursor:
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + CLAIM_SQL,
                _claim_params(prepared.columns, epochs, now),
                binary=True,
            )
            (raw,) = cursor.fetchone() or (None,)
        transaction.set_rollback(True)

    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    nodes = plan_nodes(plan)
    job_scans = [
        n for n in nodes if n.get("Relation Name") == "jobs_job" and "Scan" in n["Node Type"]
    ]
    assert job_scans, "the claim's plan reads jobs_job"
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in job_scans)
    discarded = sum(
        n.get("Rows Removed by Filter", 0) + n.get("Rows Removed by Join Filter", 0) for n in nodes
    )
    advanced = next(
        n for n in nodes if n["Node Type"] == "ModifyTable" and n.get("Relation Name") == "jobs_job"
    )
    assert advanced["Actual Rows"] == BATCH
    # Each job row looked at once at most: the batch's rows come out of the scan (by primary
    # key, or a pass over the partition when the statistics make that cheaper), never every
    # job of the partition joined with every id of the batch (500,000 comparisons here).
    assert read <= BATCH, f"the claim's scans returned {read} job rows for a batch of {BATCH}"
    assert discarded <= JOBS, f"the claim read and discarded {discarded} rows"
