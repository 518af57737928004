"""A background duty of the beat node on a thread of its own: the tick asks for a pass with
``request()`` and never waits for it (beat_engine/history_purger.py and
beat_engine/history_archiver.py are the two).

The thread starts with the first request, so a node that never holds the duty's partition
never starts it; requests while a pass runs fold into one more pass after it. Between passes
the thread holds no database connection. ``close()`` stops taking requests and waits at most
``timeout_s``: a pass still running ends with the process, which each duty makes as safe as a
crash (its work is short transactions, or steps recorded as they are done).
"""

from __future__ import annotations

import threading

from django.db import connection


class DutyThread:
    def __init__(self, *, thread_name: str) -> None:
        self._thread_name = thread_name
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.passes = 0

    def request(self) -> None:
        """On the tick's thread: start a pass soon (the thread starts with the first one)."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=self._thread_name, daemon=True
                )
                self._thread.start()
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._stop.set()
            self._wake.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> None:
        """Wait between two batches of a pass; ``close()`` cuts the wait short."""
        self._stop.wait(seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if not self._stop.is_set():
                self.work()
            connection.close()

    def work(self) -> None:
        """One pass, on the duty's thread; it must not raise (log and wait for the next)."""
        raise NotImplementedError
