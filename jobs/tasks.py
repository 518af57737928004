"""Celery tasks: the executor (thin; the work is in jobs.execution) and the dead-letter notice."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task
from django.db import close_old_connections

from beat_engine.clock import SystemClock
from beat_engine.db_clock import DatabaseClock
from jobs import metrics
from jobs.execution import run_execute
from jobs.worker_pools import release_task_connection
from jobs.worker_recycle import retire_if_overloaded

logger = logging.getLogger(__name__)

# One clock (docs/architecture.md, Invariants): the lease a start or heartbeat sets and the due
# time of a retry are judged by the reaper and the timers on the database's clock, so they are
# computed on it too, never on this host's wall clock. One sampler per process, shared by its
# task threads; a forked pool child inherits it, and the monotonic clock it carries the sample
# forward on is the host's, the same in every process.
_clock = DatabaseClock(SystemClock())


# acks_late + reject_on_worker_lost: a worker that dies mid-run leaves the message in the broker;
# the compare-and-set in run_start makes its redelivery harmless. The run row is the result,
# so no result backend is written (an outage of it must not fail the task, celery#8588).
@shared_task(
    name="jobs.execute_run",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def execute_run(run_id: str, attempt: int) -> str:
    try:
        parsed = uuid.UUID(str(run_id))
        attempt_no = int(attempt)
    except (TypeError, ValueError):
        # A malformed message can never succeed; retrying it would only loop.
        logger.error("execution.message.malformed", extra={"run_id": run_id, "attempt": attempt})
        metrics.MALFORMED_MESSAGES.inc()
        return "malformed"
    # Connections outlive tasks (CELERY_DB_REUSE_MAX): as Django does per request, drop one
    # that is broken or older than CONN_MAX_AGE, and re-arm CONN_HEALTH_CHECKS, so a connection
    # the database closed while the worker idled is replaced before the start's CAS, not found
    # broken by it.
    close_old_connections()
    try:
        outcome = run_execute(run_id=parsed, attempt=attempt_no, clock=_clock)
    finally:
        release_task_connection()
    # After the outcome is recorded, and before the result goes back for the ack: a process
    # holding too many abandoned target threads is replaced once this task is done.
    retire_if_overloaded()
    return outcome.value


@shared_task(name="jobs.dead_letter", ignore_result=True)
def dead_letter_notice(run_id: str, job_id: str, attempts: int, error: str, moved_at: str) -> None:
    """Consumer of the dead-letter queue (``celery worker -Q scheduler.dead_letters``): logs it.

    Alerting hooks subscribe here; the DeadLetter row, not this message, is the record.
    """
    logger.warning(
        "execution.dead_letter",
        extra={
            "run_id": run_id,
            "job_id": job_id,
            "attempts": attempts,
            "error": error,
            "moved_at": moved_at,
        },
    )
