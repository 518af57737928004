"""A worker process's background writer of attempt results (jobs/services/run_results.py).

The executor hands each attempt's result here after its outcome is recorded and goes on; a
thread of this process writes what accumulated every FLUSH_S (or at BATCH entries) in one
multi-row statement. Measured on this project's 2-core host, one row per attempt written
inline cost 1.3-2.4 ms per run (a commit and nine index updates), a large share of the
executor's whole overhead; in batches it is a fraction of a millisecond per row, on another
thread.

Why losing a batch is safe: the stored result is a copy for people and Celery clients to read.
The run row, written first by the outcome's compare-and-set, keeps the outcome, the error and
the target's result, and nothing decides anything from the copy. A process that dies (or is
killed) before its next flush loses at most FLUSH_S of copies; a clean shutdown flushes
(Celery's worker_process_shutdown and worker_shutdown signals, and atexit). Past MAX_PENDING
unwritten entries (the database unreachable for a while) new ones are dropped, not queued
without bound.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from celery.signals import worker_process_shutdown, worker_shutdown
from django.db import close_old_connections, connections

from jobs.services.run_results import AttemptResult, results_record_many

logger = logging.getLogger(__name__)

FLUSH_S = 0.2
BATCH = 200
MAX_PENDING = 20_000

Write = Callable[[Sequence[AttemptResult]], None]


class ResultWriter:
    def __init__(
        self,
        write: Write,
        *,
        flush_s: float = FLUSH_S,
        batch: int = BATCH,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._write = write
        self._flush_s = flush_s
        self._batch = batch
        self._max_pending = max_pending
        self._lock = threading.Lock()
        # Serialises writes: the thread's and an explicit flush() never interleave.
        self._writing = threading.Lock()
        self._pending: list[AttemptResult] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def submit(self, entry: AttemptResult) -> None:
        with self._lock:
            if len(self._pending) >= self._max_pending:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    logger.warning("execution.result.dropped", extra={"dropped": self.dropped})
                return
            self._pending.append(entry)
            full = len(self._pending) >= self._batch
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="result-writer", daemon=True
                )
                self._thread.start()
        if full:
            self._wake.set()

    def flush(self) -> None:
        """Write everything submitted so far, on the calling thread."""
        with self._writing:
            with self._lock:
                taken, self._pending = self._pending, []
            for start in range(0, len(taken), self._batch):
                self._write_quietly(taken[start : start + self._batch])

    def stop(self) -> None:
        """Write what is pending, then let the thread end and close its connection."""
        self.flush()
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._wake.set()
            thread.join(timeout=10)

    def _serve(self) -> None:
        try:
            while True:
                self._wake.wait(self._flush_s)
                self._wake.clear()
                with self._lock:
                    if not self._pending:
                        # Idle for a whole interval: end, and hold no connection while idle;
                        # the next submit starts a thread again (decided under the lock, so
                        # no entry is left without one).
                        self._thread = None
                        return
                # Like a request, each flush drops a connection that broke or outlived its age.
                close_old_connections()
                self.flush()
        except Exception:  # boundary of the writer thread: log; the next submit starts another
            logger.exception("execution.result.writer_failed")
            with self._lock:
                self._thread = None
        finally:
            connections.close_all()

    def _write_quietly(self, entries: Sequence[AttemptResult]) -> None:
        try:
            self._write(entries)
        except Exception:  # boundary: a lost batch of copies is logged; runs are unaffected
            logger.exception("execution.result.not_stored", extra={"entries": len(entries)})


_writer = ResultWriter(results_record_many)


def _reset_after_fork() -> None:
    # A forked child has none of the parent's threads and must not write its pending entries.
    global _writer
    _writer = ResultWriter(results_record_many)


os.register_at_fork(after_in_child=_reset_after_fork)


def submit(entry: AttemptResult) -> None:
    _writer.submit(entry)


def flush(**_: Any) -> None:
    _writer.flush()


def stop() -> None:
    """Flush and end this process's writer thread (tests that execute runs in-process)."""
    _writer.stop()


atexit.register(flush)
worker_process_shutdown.connect(flush, weak=False, dispatch_uid="result_writer_child")
worker_shutdown.connect(flush, weak=False, dispatch_uid="result_writer_main")
