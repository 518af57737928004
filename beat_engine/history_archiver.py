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

from django.db import connection

from beat_engine.clock import Clock
from beat_engine.duty_thread import DutyThread
from jobs.services.run_archive import ArchiveReport, archive_days, hot_cutoff

logger = logging.getLogger("beat_engine")


class HistoryArchiver(DutyThread):
    def __init__(self, *, clock: Clock, node_id: str) -> None:
        super().__init__(thread_name="beat-archive")
        self._clock = clock
        self._node_id = node_id

    def work(self) -> None:
        self._pass()

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
