"""Each attempt's result or traceback, kept in django-celery-results' TaskResult table.

The row of an attempt has the task id ``<run id>:<attempt>``, so it is found from the run alone
(no column of ours points at it) and Celery reads it back as usual:
``AsyncResult("<run id>:<attempt>").result`` is the target's return value (a ``task`` target's
Celery task result, a callable's return value, an HTTP target's response summary), or for a
failed attempt an exception carrying the error.

The run row, written first by the outcome's compare-and-set, stays the record of how a run
ended; this row is a copy for people and Celery clients to read. Workers hand it to a
background writer after the outcome (jobs/result_writer.py), which writes batches whose commit
does not wait for the WAL flush. The rows go with their runs (``results_delete_for_runs``, and
a job's deletion, connected in jobs/apps.py).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import states
from django.db import connection, transaction
from django_celery_results.models import TaskResult

from jobs.models import Job, JobRun

logger = logging.getLogger(__name__)

# Tracebacks are for people to read; a deep recursion's must not bloat the table.
TRACEBACK_MAX_CHARS = 16_000
_NAME_MAX_CHARS = 255


def result_task_id(run_id: uuid.UUID | str, attempt: int) -> str:
    return f"{run_id}:{attempt}"


@dataclass(frozen=True)
class AttemptResult:
    run_id: uuid.UUID
    attempt: int
    job_id: uuid.UUID
    # The Celery task, callable or URL the attempt ran.
    target: str
    # SUCCESS, FAILURE or REVOKED (celery.states).
    status: str
    result: Any
    error: str
    traceback: str
    worker: str
    started_at: datetime
    finished_at: datetime
    # False when the outcome write was refused: this attempt had been superseded.
    accepted: bool = True


_COLUMNS = (
    "task_id, task_name, task_args, task_kwargs, status, worker, content_type, "
    "content_encoding, result, date_created, date_started, date_done, traceback, meta"
)
_ROW = "(%s, %s, %s, %s, %s, %s, 'application/json', 'utf-8', %s, %s, %s, %s, %s, %s)"
_RECORD_SQL = """
INSERT INTO django_celery_results_taskresult ({columns})
VALUES {rows}
ON CONFLICT (task_id) DO UPDATE
   SET status = EXCLUDED.status, result = EXCLUDED.result, date_done = EXCLUDED.date_done,
       traceback = EXCLUDED.traceback, meta = EXCLUDED.meta, worker = EXCLUDED.worker
"""


def _encoded_result(entry: AttemptResult) -> str:
    if entry.status == states.SUCCESS:
        return json.dumps(entry.result, default=str)
    # Celery's own shape for a failure, read back by AsyncResult as an exception; a null module
    # makes Celery build a plain Exception subclass of that name, never import anything.
    exc_type = entry.error.split(":", 1)[0].strip() if ":" in entry.error else ""
    if not exc_type.isidentifier():
        exc_type = "AttemptFailed" if entry.status == states.FAILURE else "AttemptCancelled"
    return json.dumps(
        {"exc_type": exc_type, "exc_message": [entry.error], "exc_module": None}, default=str
    )


def _row(entry: AttemptResult) -> list[Any]:
    meta: dict[str, Any] = {
        "children": [],
        "run_id": str(entry.run_id),
        "attempt": entry.attempt,
        "job_id": str(entry.job_id),
        "accepted": entry.accepted,
        "error": entry.error,
        # A failed attempt's response summary (an HTTP status and body), if any.
        "response": None if entry.status == states.SUCCESS else entry.result,
    }
    return [
        result_task_id(entry.run_id, entry.attempt),
        entry.target[:_NAME_MAX_CHARS],
        json.dumps([str(entry.run_id), entry.attempt]),
        json.dumps({"job_id": str(entry.job_id)}),
        entry.status,
        entry.worker[:100],
        _encoded_result(entry),
        entry.finished_at,
        entry.started_at,
        entry.finished_at,
        entry.traceback[-TRACEBACK_MAX_CHARS:] or None,
        json.dumps(meta, default=str),
    ]


def results_record_many(entries: Sequence[AttemptResult]) -> None:
    """Write (or rewrite) these attempts' TaskResults in one statement, its commit not flushed.

    ``synchronous_commit`` is off for this transaction only: a database crash may lose the
    last fraction of a second of these copies, never an outcome (the run row has its own,
    synchronous commit).
    """
    # One row per task id: a statement may not update the same row twice.
    latest = {result_task_id(e.run_id, e.attempt): e for e in entries}
    if not latest:
        return
    params = [value for entry in latest.values() for value in _row(entry)]
    sql = _RECORD_SQL.format(columns=_COLUMNS, rows=", ".join([_ROW] * len(latest)))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(sql, params)


def result_record(entry: AttemptResult) -> None:
    results_record_many([entry])


def results_of_run(run: JobRun) -> dict[int, TaskResult]:
    """The run's stored attempt results, by attempt number (one indexed lookup)."""
    ids = {result_task_id(run.id, number): number for number in range(1, run.attempt + 1)}
    return {ids[row.task_id]: row for row in TaskResult.objects.filter(task_id__in=list(ids))}


def result_decoded(row: TaskResult) -> Any:
    try:
        return json.loads(row.result) if row.result else None
    except ValueError:
        return row.result


# Keyed by the attempts that exist, so it runs before the runs (and attempts) are deleted.
_DELETE_FOR_RUNS_SQL = """
DELETE FROM django_celery_results_taskresult AS t
 USING jobs_runattempt AS a
 WHERE a.run_id = ANY(%(runs)s)
   AND t.task_id = a.run_id::text || ':' || a.attempt::text
"""

_DELETE_FOR_JOB_SQL = """
DELETE FROM django_celery_results_taskresult AS t
 USING jobs_runattempt AS a, jobs_jobrun AS r
 WHERE r.job_id = %(job)s AND a.run_id = r.id
   AND t.task_id = a.run_id::text || ':' || a.attempt::text
"""


def results_delete_for_runs(run_ids: Iterable[uuid.UUID]) -> int:
    """Delete the stored results of these runs' attempts; call it before deleting the runs."""
    runs = list(run_ids)
    if not runs:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(_DELETE_FOR_RUNS_SQL, {"runs": runs})
        return int(cursor.rowcount)


def runs_delete(run_ids: Iterable[uuid.UUID]) -> int:
    """Delete runs with their attempts and stored results, in one transaction."""
    runs = list(run_ids)
    with transaction.atomic():
        results_delete_for_runs(runs)
        deleted, _ = JobRun.objects.filter(id__in=runs).delete()
    return deleted


def results_delete_for_job(sender: type[Job], instance: Job, **kwargs: Any) -> None:
    """pre_delete of a job: its runs go by cascade, so their results go first, here."""
    with connection.cursor() as cursor:
        cursor.execute(_DELETE_FOR_JOB_SQL, {"job": instance.pk})
