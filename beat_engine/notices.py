"""Dead-letter notices sent off the engine's thread: a bounded queue and one sender thread.

The notice is informational; the durable record is the DeadLetter row, committed before the
notice is offered. So the tick never waits for the broker that takes notices: a slow or hung
one must not stop the engine renewing its leases. The queue is bounded (a hung broker
costs at most ``capacity`` notices of memory; beyond it notices are dropped, counted and
logged), and the sender's own broker connection has short socket timeouts, so one notice
ties the thread up for seconds, not forever.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from beat_engine import metrics
from jobs.services.dead_letters import dead_letter_announce

logger = logging.getLogger("beat_engine")


@dataclass(frozen=True)
class Notice:
    run_id: uuid.UUID
    job_id: uuid.UUID
    attempts: int
    error: str
    now: datetime


# Wakes the sender at close: no more notices follow.
_CLOSE = object()


class DeadLetterNotices:
    def __init__(
        self,
        *,
        capacity: int = 1000,
        socket_timeout_s: float = 5.0,
        close_wait_s: float = 2.0,
        broker_url: str | None = None,
    ) -> None:
        self._queue: queue.Queue[Notice | object] = queue.Queue(maxsize=capacity)
        self._socket_timeout_s = socket_timeout_s
        self._close_wait_s = close_wait_s
        self._broker_url = broker_url
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Set when close() stops waiting: the sender leaves after the notice in hand.
        self._abandoned = threading.Event()
        self.dropped = 0

    def offer(
        self, dead_runs: Iterable[tuple[uuid.UUID, uuid.UUID, int, str]], *, now: datetime
    ) -> None:
        """Queue one notice per (run, job, attempts, error); never blocks."""
        for run_id, job_id, attempts, error in dead_runs:
            self._start()
            try:
                self._queue.put_nowait(Notice(run_id, job_id, attempts, error, now))
            except queue.Full:
                self.dropped += 1
                metrics.count(metrics.DEAD_LETTER_NOTICES_DROPPED)
                logger.warning("beat.dead_letter_notice_dropped", extra={"run_id": str(run_id)})

    def close(self) -> None:
        """Let the sender finish what is queued, waiting at most close_wait_s: a hung broker
        must not hold up a shutdown (what is left is lost; the DeadLetter rows stay)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(queue.Full):  # full: the sender is stuck, abandoned below
            self._queue.put(_CLOSE, timeout=self._close_wait_s)
        thread.join(timeout=self._close_wait_s)
        if thread.is_alive():
            self._abandoned.set()
            logger.warning("beat.dead_letter_notices_abandoned", extra={"queued": self.pending})

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                # A daemon: a sender stuck on a hung broker never keeps the process alive.
                self._thread = threading.Thread(
                    target=self._send_all, name="beat-dead-letter-notices", daemon=True
                )
                self._thread.start()

    def _send_all(self) -> None:
        connection = self._connection()
        try:
            while not self._abandoned.is_set():
                notice = self._queue.get()
                if notice is _CLOSE:
                    break
                assert isinstance(notice, Notice)
                dead_letter_announce(
                    run_id=notice.run_id, job_id=notice.job_id, attempts=notice.attempts,
                    error=notice.error, now=notice.now, connection=connection,
                )  # fmt: skip
        finally:
            connection.release()

    def _connection(self) -> Any:
        """The sender's own broker connection (kombu connections are not shared between
        threads), with short socket timeouts: the transport's default waits forever."""
        from scheduler_project.celery import app

        # Celery merges these into the configured broker_transport_options.
        options = {
            "socket_timeout": self._socket_timeout_s,
            "socket_connect_timeout": self._socket_timeout_s,
        }
        return app.connection_for_write(self._broker_url, transport_options=options)
