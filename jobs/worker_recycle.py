"""Retiring a worker pool process that holds too many abandoned target threads.

A target that ignores cancellation keeps its thread after its attempt ended (jobs/execution.py);
a thread cannot be killed from Python, only the process that holds it. So once a process holds
MAX_ABANDONED_TARGETS of them, the task that noticed asks the prefork pool to retire this
process after the task's own result: billiard gives every pool process a shutdown event when
pool restarts are enabled (CELERY_WORKER_POOL_RESTARTS), and a process whose event is set exits
cleanly (exit code 0) before taking another message, exactly as it does for Celery's own
``pool_restart``. The parent has the task's result and acks the message first, then forks a
replacement, and a message already written to the retiring process is handed to another
(asynpool ``on_partial_read``). No WorkerLostError, no redelivery, no lost message.

Celery's own limits cannot do this: ``worker_max_tasks_per_child`` and
``worker_max_memory_per_child`` are fixed when the pool starts and do not see threads, and a
task that raises SystemExit to end its process is reported as a lost worker, whose message
``reject_on_worker_lost`` then requeues.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

from django.conf import settings

from jobs import metrics
from jobs.target_threads import abandoned_targets

logger = logging.getLogger(__name__)


class _Event(Protocol):
    def set(self) -> None: ...

    def is_set(self) -> bool: ...


def _pool_shutdown_event() -> _Event | None:
    """This pool process's billiard shutdown event, or None outside a restartable pool."""
    from billiard.process import current_process

    # billiard's pool runs its Worker as the process target; with pool restarts enabled the
    # Worker holds the event its parent would set for a pool restart, and checks it before
    # reading each job. There is no public accessor for one's own event.
    worker = getattr(current_process(), "_target", None)
    event = getattr(worker, "_shutdown", None)
    if callable(getattr(event, "set", None)) and callable(getattr(event, "is_set", None)):
        return event
    return None


def retire_if_overloaded() -> bool:
    """Ask for this pool process to be replaced once it holds too many abandoned targets.

    Called after a run's outcome is recorded. True when the retirement was requested.
    """
    limit = int(settings.SCHEDULER["MAX_ABANDONED_TARGETS"])
    held = abandoned_targets()
    if held < limit:
        return False
    event = _pool_shutdown_event()
    if event is None:
        # Solo or threads pool, or pool restarts off: nothing to retire but the whole worker.
        logger.error(
            "execution.worker.cannot_retire",
            extra={"abandoned_targets": held, "limit": limit, "pid": os.getpid()},
        )
        metrics.WORKER_RETIRE_UNAVAILABLE.inc()
        return False
    if not event.is_set():
        logger.warning(
            "execution.worker.retiring",
            extra={"abandoned_targets": held, "limit": limit, "pid": os.getpid()},
        )
        metrics.WORKER_RETIREMENTS.inc()
        event.set()
    return True


def retire_after_this_task() -> bool:
    """Ask for this pool process to exit once its current task is done (a stopping worker,
    jobs/worker_shutdown.py). False outside a restartable prefork pool."""
    event = _pool_shutdown_event()
    if event is None:
        return False
    event.set()
    return True
