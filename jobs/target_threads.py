"""Threads that run targets, kept across runs so that a run does not start a thread."""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from django.db import close_old_connections, connections

from jobs import metrics
from jobs.outcomes import ResultKind, TargetResult
from jobs.targets import invoke_guarded

logger = logging.getLogger(__name__)


class PendingResult:
    """A target's result, set by the thread that ran it; ``done`` is set even if it failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: TargetResult | None = None
        # Both guarded by the owning TargetThreads' lock, so that a target that returns just
        # as the supervisor gives up on it is counted as abandoned either once or not at all.
        self.finished = False
        self.abandoned = False


class TargetThreads:
    """Runs each target on an idle thread, or on a new one when none is idle; never queues.

    A fixed-size pool would make a run wait behind a target abandoned after the cancel grace,
    whose thread keeps running; here an abandoned target holds only its own thread. Threads
    beyond ``max_idle`` idle ones exit, so a worker process keeps one in the steady state.
    Abandoned targets still running are counted (``abandoned``), so that the process can be
    retired before they pile up (jobs/worker_recycle.py).
    """

    def __init__(self, max_idle: int = 1, name: str = "scheduler-target") -> None:
        self._max_idle = max_idle
        self._name = name
        self._lock = threading.Lock()
        self._idle = 0
        self._abandoned = 0
        self._work: queue.SimpleQueue[tuple[Callable[[], TargetResult], PendingResult]] = (
            queue.SimpleQueue()
        )

    def submit(self, invoke: Callable[[], TargetResult]) -> PendingResult:
        pending = PendingResult()
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1
        # Every queued item has a thread that will take it: an idle one counted above (it is
        # blocked in get() or about to be), or the one started here.
        self._work.put((invoke, pending))
        if not reuse:
            threading.Thread(target=self._serve, name=self._name, daemon=True).start()
        return pending

    def abandon(self, pending: PendingResult) -> int:
        """The supervisor gave up on ``pending``; how many abandoned targets still run here."""
        with self._lock:
            if not pending.finished and not pending.abandoned:
                pending.abandoned = True
                self._abandoned += 1
            return self._abandoned

    @property
    def abandoned(self) -> int:
        """Targets given up on whose threads have not returned yet."""
        with self._lock:
            return self._abandoned

    def _serve(self) -> None:
        while True:
            invoke, pending = self._work.get()
            try:
                # Django connections are per thread and this one outlives the run: like a
                # request, a run begins and ends by dropping a connection that is broken or
                # older than CONN_MAX_AGE (and re-arms CONN_HEALTH_CHECKS for the next use).
                close_old_connections()
                pending.result = invoke_guarded(invoke)
                close_old_connections()
            except Exception:  # boundary of the target thread's loop: log, count, carry on
                logger.exception("execution.target_thread.failed")
                metrics.TARGET_THREAD_ERRORS.inc()
                if pending.result is None:
                    pending.result = TargetResult(
                        ResultKind.RETRYABLE, error="the target thread failed; see worker log"
                    )
            finally:
                pending.done.set()
            with self._lock:
                pending.finished = True
                if pending.abandoned:
                    self._abandoned -= 1
                if self._idle >= self._max_idle:
                    break
                self._idle += 1
        connections.close_all()


_threads = TargetThreads()


def _reset_after_fork() -> None:
    # Threads do not survive fork(); a child must not count its parent's idle threads.
    global _threads
    _threads = TargetThreads()


os.register_at_fork(after_in_child=_reset_after_fork)


def run_target(invoke: Callable[[], TargetResult]) -> PendingResult:
    """Start ``invoke`` on a target thread; wait on the returned ``done`` for its result."""
    return _threads.submit(invoke)


def abandon_target(pending: PendingResult) -> int:
    """Count ``pending`` as abandoned (until it returns); the number now abandoned here."""
    return _threads.abandon(pending)


def abandoned_targets() -> int:
    """How many abandoned targets are still running in this process."""
    return _threads.abandoned
