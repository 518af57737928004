"""The beat node's history duty, on a thread of its own: creating the run history's partitions
ahead (jobs/services/history_partitions.py) and purging expired dedup keys, closed dead
letters and old stored results (jobs/services/history_retention.py, docs/history.md).

The tick asks for a pass every ``SCHEDULER["HISTORY_PURGE_S"]`` while the node holds partition
0, so one node of the cluster does it; two holders during a hand-over still purge one at a
time, since every batch takes the purge's advisory lock first. A pass deletes in bounded
batches for at most PASS_BUDGET_S; with rows left, the next pass follows after PAUSE_S, so a
backlog is worked off without holding the database busy. The tick never waits for it, and a
failed pass is logged and tried again at the next request: nothing leaves the thread.
"""

from __future__ import annotations

import logging
from datetime import UTC

from django.conf import settings
from django.db import connection

from beat_engine.clock import Clock
from beat_engine.duty_thread import DutyThread
from jobs.services.history_partitions import partitions_ensure_ahead
from jobs.services.history_retention import PurgeReport, history_purge

logger = logging.getLogger("beat_engine")

PASS_BUDGET_S = 5.0
PAUSE_S = 0.5


class HistoryPurger(DutyThread):
    def __init__(self, *, clock: Clock, node_id: str, ahead_days: int | None = None) -> None:
        super().__init__(thread_name="beat-history")
        self._clock = clock
        self._node_id = node_id
        self._ahead_days = (
            int(settings.SCHEDULER.get("PARTITIONS_AHEAD_DAYS", 2))
            if ahead_days is None
            else ahead_days
        )

    def work(self) -> None:
        """Partitions ahead, then purge passes until nothing is left (or the node stops);
        each batch is one short transaction, so a stop waits for one batch at most."""
        self._ensure_partitions()
        more = True
        while more and not self.stopping:
            more = self._pass()
            if more:
                self.pause(PAUSE_S)

    def _ensure_partitions(self) -> None:
        """Today's and the next days' partitions (idempotent: a pass finds them and creates
        nothing); a failure is logged and the purge goes on, the next request tries again."""
        try:
            today = self._clock.now().astimezone(UTC).date()
            report = partitions_ensure_ahead(today, self._ahead_days)
        except Exception:  # the thread's one broad except, as for the purge below
            logger.warning(
                "beat.history_partitions_failed", extra={"node": self._node_id}, exc_info=True
            )
            connection.close()
            return
        if report.created:
            logger.info(
                "beat.history_partitions_created",
                extra={"node": self._node_id, "days": [d.isoformat() for d in report.created]},
            )

    def _pass(self) -> bool:
        """One pass; True when it stopped with rows left to purge."""
        try:
            report = history_purge(
                now=self._clock.now(), monotonic=self._clock.monotonic, budget_s=PASS_BUDGET_S
            )
        except Exception:  # the thread's one broad except: a failed pass waits for the next
            logger.warning(
                "beat.history_purge_failed", extra={"node": self._node_id}, exc_info=True
            )
            connection.close()
            return False
        self.passes += 1
        self._log(report)
        return report.more

    def _log(self, report: PurgeReport) -> None:
        if report.total:
            logger.info(
                "beat.history_purged",
                extra={"node": self._node_id, "more": report.more, **report.deleted},
            )
