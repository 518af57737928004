"""The beat node's archive duty, on a thread of its own: every day past the hot window is
archived to files and dropped (jobs/services/run_archive.py, docs/history.md, "Archive").

The tick asks for a pass every ``SCHEDULER["HISTORY_ARCHIVE_S"]`` (a day) while the node holds
partition 0, the first one a purge period after the node starts (so a node restarted every day
still archives); one node of the cluster does it, and it moves with partition 0 when a node
dies. Two holders of partition 0 during a hand-over never archive together: a pass holds the
archive's advisory lock, and a node that does not get it ends its pass, and every step of a day
is a compare-and-set on its recorded step. A pass may take minutes (a day of runs is exported
and verified): the tick never waits for it, and the purges have their own thread. A failed pass
is logged and the next request goes on from each day's recorded step.
"""

from __future__ import annotations

import logging
import threading

from django.db import connection

from beat_engine.clock import Clock
from jobs.services.run_archive import ArchiveReport, archive_days, hot_cutoff

logger = logging.getLogger("beat_engine")


class HistoryArchiver:
    def __init__(self, *, clock: Clock, node_id: str) -> None:
        self._clock = clock
        self._node_id = node_id
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
                self._thread = threading.Thread(target=self._run, name="beat-archive", daemon=True)
                self._thread.start()
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop taking requests. A pass still running is not waited for past ``timeout_s``:
        it ends with the process, where it is, which is as safe as a crash (every step is
        recorded, and the next pass, here or on another node, goes on from it)."""
        with self._lock:
            self._stop.set()
            self._wake.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if not self._stop.is_set():
                self._pass()
            # Between passes the thread holds no database connection.
            connection.close()

    def _pass(self) -> None:
        try:
            report = archive_days(before=hot_cutoff(self._clock.now()), clock=self._clock.now)
        except Exception:  # the thread's one broad except (ArchiveFailed too): the next pass
            logger.warning(
                "beat.history_archive_failed", extra={"node": self._node_id}, exc_info=True
            )
            connection.close()
            return
        self.passes += 1
        self._log(report)

    def _log(self, report: ArchiveReport) -> None:
        held = report.by("held") + report.by("busy")
        if held:
            logger.warning(
                "beat.history_days_kept_hot",
                extra={
                    "node": self._node_id,
                    "days": {d.day.isoformat(): d.reason for d in held},
                },
            )
        archived = report.by("archived")
        if archived:
            logger.info(
                "beat.history_archived",
                extra={
                    "node": self._node_id,
                    "days": len(archived),
                    "runs": sum(d.runs for d in archived),
                },
            )
