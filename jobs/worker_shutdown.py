"""A stopping worker ends every attempt it cannot finish in time, so none is left ``running``.

Celery stops a worker in one of two ways. Its warm shutdown (SIGTERM) stops taking messages
and waits for the running tasks, however long they take. Its cold shutdown (SIGQUIT, or
SIGTERM with ``REMAP_SIGTERM=SIGQUIT``) waits ``CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT`` and then
sends SIGTERM to every busy pool process. SIGTERM's default action killed that process in the
middle of its attempt, whose run then stayed ``running`` until its run lease expired and the
engine's reaper gave it a new attempt. Here:

* in each prefork pool process, SIGTERM no longer kills a process that runs an attempt: it
  asks each of its supervisors to stop its target (``context.cancelled``, an HTTP call
  aborted, ``CANCEL_GRACE_S`` for it to return) and to end the attempt itself, with what the
  reaper would have written later: attempt outcome ``lost`` and the run in ``retry_wait`` due
  at once, so the timers queue the next attempt now rather than after the lease (``dead`` on
  the last allowed attempt, ``cancelled`` when its cancel was requested). Each is the
  ordinary outcome statement, a compare-and-set on (run, attempt, running), so an attempt the
  reaper had already ended is refused as stale (no stale fence, docs/architecture.md,
  Invariants). The process then takes no new message and exits. A process running no attempt
  dies at once, as before: it has nothing to hand back;
* in the main process, a warm shutdown is bounded by the same timeout: when it has not ended
  after ``CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT`` (when above 0), the pool processes still
  running an attempt get SIGTERM, as the cold shutdown's do; with the threads or gevent pool,
  whose attempts run in the main process itself, their supervisors are told to stop there.

The signal handler only writes a byte to a pipe: a handler runs on the process's main thread,
which is the supervisor's own, between two of its bytecodes, perhaps inside an Event's lock,
so waking the supervisors from it could deadlock. A watcher thread reads the pipe and does the
rest. docs/execution.md, "Stopping a worker".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from billiard.common import TERM_SIGNAL
from celery.signals import worker_process_init, worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings

from jobs import metrics
from jobs.worker_recycle import retire_after_this_task
from scheduler_project.gevent_patch import under_gevent

logger = logging.getLogger(__name__)

EXECUTE_TASK = "jobs.execute_run"


class _Attempts:
    """The supervisors' wake events of the attempts running in this process, and whether it
    was told to stop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wakes: set[threading.Event] = set()
        self.stopping = False


_attempts = _Attempts()


def _reset_after_fork() -> None:
    # A pool process starts with none of its parent's attempts (it has none anyway).
    global _attempts
    _attempts = _Attempts()


os.register_at_fork(after_in_child=_reset_after_fork)


@contextlib.contextmanager
def attempt(wake: threading.Event) -> Iterator[None]:
    """Register a running attempt's supervisor, woken through ``wake`` when the process is
    told to stop (at once if it already was)."""
    if _pool is not None:
        _pool.install()
    with _attempts.lock:
        _attempts.wakes.add(wake)
        if _attempts.stopping:
            wake.set()
    try:
        yield
    finally:
        with _attempts.lock:
            _attempts.wakes.discard(wake)


def stopping() -> bool:
    """Whether this process was told to stop: its attempts end now, handed back."""
    return _attempts.stopping


def _stop_requested() -> None:
    with _attempts.lock:
        _attempts.stopping = True
        wakes = list(_attempts.wakes)
        for wake in wakes:
            wake.set()
    logger.warning("execution.worker.stopping", extra={"pid": os.getpid(), "attempts": len(wakes)})
    metrics.SHUTDOWN_HANDED_BACK.inc(len(wakes))
    # After the attempts' outcomes, this process reads no further message.
    retire_after_this_task()


def _watch(read_fd: int) -> None:
    while True:
        try:
            if not os.read(read_fd, 64):
                return  # the pipe was closed: the process is going away
            _stop_requested()
        except Exception:  # boundary of the watcher thread: log and keep watching
            logger.exception("execution.worker.stop_watch_failed")


class _PoolProcess:
    """This pool process's pipe to its watcher thread, and its SIGTERM handler."""

    def __init__(self, write_fd: int) -> None:
        self.write_fd = write_fd
        self.installed = False
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """On the main thread, at the first attempt: billiard sets its own SIGTERM handler
        after worker_process_init (``reset_signals``), so ours goes in later, and chains to
        it when there is nothing to hand back."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = True
        # SIGTERM, and the signal Celery's cold shutdown sends its busy pool processes instead
        # when the worker runs with REMAP_SIGTERM=SIGQUIT (billiard's TERM_SIGNAL).
        for signum in {signal.SIGTERM, TERM_SIGNAL}:
            self.previous[signum] = signal.signal(signum, self.on_term)

    def on_term(self, signum: int, frame: FrameType | None) -> None:
        # On the main thread, the only one that registers attempts (the task runs on it), so
        # the set cannot change under this read.
        if not _attempts.wakes:
            # Nothing to hand back: what SIGTERM did before (billiard's handler exits the
            # process; a message taken and not started goes back, reject_on_worker_lost).
            previous = self.previous.get(signum)
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        # Only a byte on the pipe, no lock: the watcher thread does the rest.
        with contextlib.suppress(BlockingIOError):
            os.write(self.write_fd, b"t")


_pool: _PoolProcess | None = None


def _install_in_pool_process(**_kwargs: Any) -> None:
    """worker_process_init: the watcher thread and its pipe; the handler comes with the first
    attempt (``_PoolProcess.install``)."""
    global _pool
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    _pool = _PoolProcess(write_fd)
    # A daemon: it lives as long as the process, blocked on the pipe, and holds no resource.
    threading.Thread(
        target=_watch, args=(read_fd,), name="scheduler-stop-watch", daemon=True
    ).start()


class _WarmBound:
    """Main process: SIGTERM to the pool processes still running an attempt once a warm
    shutdown has lasted CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT."""

    def __init__(self) -> None:
        self.begun = threading.Event()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        # Started before any signal (worker_ready), so the signal handler below only sets an
        # event, which no thread but this one ever holds the lock of for long.
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._run, name="scheduler-shutdown-bound", daemon=True
            )
            self.thread.start()

    def _run(self) -> None:
        try:
            self.begun.wait()
            timeout = float(settings.CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT)
            if self.done.is_set() or timeout <= 0 or self.done.wait(timeout):
                return
            _end_remaining_attempts(timeout)
        except Exception:  # boundary of the thread: log and stop
            logger.exception("execution.worker.shutdown_bound_failed")

    def stop(self) -> None:
        self.done.set()
        self.begun.set()


_bound = _WarmBound()


def _end_remaining_attempts(timeout: float) -> None:
    from celery.worker import state

    pids = {
        request.worker_pid
        for request in list(state.active_requests)
        if request.task_name == EXECUTE_TASK and request.worker_pid
    }
    if pids and (under_gevent() or os.getpid() in pids):
        # A solo, threads or gevent pool runs its tasks in this very process, its supervisors
        # registered here: they are told to stop and hand their attempts back, as a prefork
        # pool process does on SIGTERM (docs/execution.md, "Worker pools"). The gevent pool
        # gives a request its greenlet's id as the pid, which is no process to signal.
        pids = set() if under_gevent() else pids - {os.getpid()}
        logger.warning(
            "execution.worker.soft_timeout_passed",
            extra={"pid": os.getpid(), "timeout_s": timeout},
        )
        _stop_requested()
    for pid in sorted(pids):
        logger.warning(
            "execution.worker.soft_timeout_passed", extra={"pid": pid, "timeout_s": timeout}
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _on_ready(**_kwargs: Any) -> None:
    _bound.start()


def _on_shutting_down(*, how: str = "", **_kwargs: Any) -> None:
    # Sent from the main process's signal handler. The cold shutdown bounds itself (Celery
    # signals its busy pool processes after the same timeout); only the warm one needs this.
    if how == "Warm":
        _bound.begun.set()


def _on_shutdown(**_kwargs: Any) -> None:
    _bound.stop()


worker_process_init.connect(_install_in_pool_process, weak=False, dispatch_uid="stop_watch")
worker_ready.connect(_on_ready, weak=False, dispatch_uid="shutdown_bound_start")
worker_shutting_down.connect(_on_shutting_down, weak=False, dispatch_uid="shutdown_bound")
worker_shutdown.connect(_on_shutdown, weak=False, dispatch_uid="shutdown_bound_stop")
