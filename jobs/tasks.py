"""Celery tasks: the executor (thin; the work is in jobs.execution) and the dead-letter notice."""

from __future__ import annotations

import logging

from celery import shared_task

from beat_engine.clock import SystemClock
from beat_engine.db_clock import DatabaseClock
from jobs.execution import run_delivery
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
    outcome = run_delivery(run_id, attempt, clock=_clock)
    # After the outcome is recorded, and before the result goes back for the ack: a process
    # holding too many abandoned target threads is replaced once this task is done.
    retire_if_overloaded()
    return outcome


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
