"""Retention of what grows with every firing besides the runs themselves: dedup keys, dead
letters and stored attempt results (docs/history.md, "Retention").

Each table is purged oldest first, a bounded batch per statement and per transaction, so a
purge after a long outage (or a retention made shorter) deletes in slices: no statement holds
row locks for long, and autovacuum keeps up. Rows another transaction holds are skipped
(``SKIP LOCKED``), never waited for: a key being re-recorded right now is left for the next
pass. One node purges at a time: every batch takes a transaction advisory lock first, and a
node that does not get it stops its pass (beat_engine/history_purger.py runs the passes).

What is never purged (the protected rows):

* a dedup key whose run is still live (pending, queued, running, retry_wait): another attempt
  of that run may start, and its start must still see the key (no duplicate effect,
  docs/architecture.md, Invariants);
* a dedup key whose run is dead: its dead letter is open, and a replay is another attempt;
* a dedup key whose run failed less than the dead-letter retention ago (a failed run may be
  replayed too);
* an open dead letter (its run is dead, or a replay of it is still in flight).

A protected key may be past its ``expires_at``; the start statement and ``dedup_record`` still
honour a key recorded by the same run (jobs/services/starts.py, jobs/services/dedup.py), so an
expired key of a live run keeps its meaning until the run is over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from jobs import metrics
from jobs.states import RunState

logger = logging.getLogger(__name__)

# A batch deletes at most this many rows: a few tens of milliseconds of locks, measured with
# bench/bench_history.py (docs/benchmarks.md, "Run history").
PURGE_BATCH = 5_000
# The key of the transaction advisory lock that makes one node purge at a time
# (an arbitrary constant, its bytes spell "HISTPURG").
PURGE_LOCK_KEY = 0x4849535450555247

_LIVE_STATES = sorted(
    s.value for s in (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT)
)

# A key is purged once expired and not protected (module docstring). The run is looked up by
# its id alone, one probe per key, in a correlated scalar subquery: PostgreSQL turns a NOT
# EXISTS into an anti join, which over the partitioned runs table hashes the protected runs of
# every partition (a scan of the whole history per batch); the scalar probe stays a lookup by
# id that reads the one partition the id names (docs/history.md, "Partitions").
_DEDUP_SQL = """
DELETE FROM jobs_dedupkey WHERE key IN (
    SELECT d.key FROM jobs_dedupkey AS d
     WHERE d.expires_at <= %(now)s
       AND (SELECT 1 FROM jobs_jobrun AS r
             WHERE r.id = d.run_id
               AND (r.state = ANY(%(live)s) OR r.state = %(dead)s
                    OR (r.state = %(failed)s AND r.finished_at > %(replayable_after)s))
             LIMIT 1) IS NULL
     ORDER BY d.expires_at
     LIMIT %(batch)s
       FOR UPDATE OF d SKIP LOCKED)
"""

# A dead letter is closed once it was replayed and its run is neither dead again nor still
# in flight; it is purged when its last replay is older than the retention. Its run's state is
# read by id, one probe per letter, for the reason given above _DEDUP_SQL (a join would be a
# hash join over every partition); a letter whose run is gone matches no state, as the join's
# did not.
_DEAD_LETTER_SQL = """
DELETE FROM jobs_deadletter WHERE id IN (
    SELECT dl.id FROM jobs_deadletter AS dl
     WHERE dl.replayed_at IS NOT NULL AND dl.replayed_at < %(cutoff)s
       AND (SELECT r.state FROM jobs_jobrun AS r WHERE r.id = dl.run_id)
           <> ALL(%(kept)s)
     ORDER BY dl.replayed_at
     LIMIT %(batch)s
       FOR UPDATE OF dl SKIP LOCKED)
"""

# django-celery-results' own cleanup (celery.backend_cleanup) is a periodic task that Celery
# beat schedules; this project has no Celery beat, so the beat nodes do it.
_RESULTS_SQL = """
DELETE FROM django_celery_results_taskresult WHERE id IN (
    SELECT id FROM django_celery_results_taskresult
     WHERE date_done < %(cutoff)s
     ORDER BY date_done
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED)
"""


def dead_letter_retention() -> timedelta:
    return timedelta(days=settings.SCHEDULER["DEAD_LETTER_RETENTION_DAYS"])


def result_retention() -> timedelta:
    return timedelta(days=settings.SCHEDULER["RESULT_RETENTION_DAYS"])


def _purge_dedup_keys(*, now: datetime, batch: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            _DEDUP_SQL,
            {
                "now": now,
                "live": _LIVE_STATES,
                "dead": RunState.DEAD.value,
                "failed": RunState.FAILED.value,
                "replayable_after": now - dead_letter_retention(),
                "batch": batch,
            },
        )
        return int(cursor.rowcount)


def _purge_dead_letters(*, now: datetime, batch: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            _DEAD_LETTER_SQL,
            {
                "cutoff": now - dead_letter_retention(),
                "kept": sorted([RunState.DEAD.value, *_LIVE_STATES]),
                "batch": batch,
            },
        )
        return int(cursor.rowcount)


def _purge_results(*, now: datetime, batch: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_RESULTS_SQL, {"cutoff": now - result_retention(), "batch": batch})
        return int(cursor.rowcount)


Purge = Callable[..., int]
PURGES: dict[str, Purge] = {
    "jobs_dedupkey": _purge_dedup_keys,
    "jobs_deadletter": _purge_dead_letters,
    "django_celery_results_taskresult": _purge_results,
}


@dataclass
class PurgeReport:
    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PURGES, 0))
    # Another node held the purge lock: this pass stopped at once.
    locked_out: bool = False
    # The pass used up its time budget with rows left to delete.
    more: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def _locked_batch(purge: Purge, *, now: datetime, batch: int) -> int | None:
    """One batch in its own transaction under the purge lock; None when another node holds
    the lock (the transaction ends at once, changing nothing)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [PURGE_LOCK_KEY])
            row = cursor.fetchone()
        if row is None or not row[0]:
            return None
        return purge(now=now, batch=batch)


def history_purge(
    *,
    now: datetime,
    batch: int = PURGE_BATCH,
    monotonic: Callable[[], float],
    budget_s: float = 5.0,
) -> PurgeReport:
    """Purge every table past its retention at ``now`` (the database's clock), batch after
    batch, until each is done or ``budget_s`` (on ``monotonic``) is spent: the next pass goes
    on where this one stopped."""
    report = PurgeReport()
    deadline = monotonic() + budget_s
    for table, purge in PURGES.items():
        while True:
            if monotonic() >= deadline:
                report.more = True
                return report
            deleted = _locked_batch(purge, now=now, batch=batch)
            if deleted is None:
                report.locked_out = True
                return report
            if deleted:
                report.deleted[table] += deleted
                metrics.HISTORY_PURGED_ROWS.labels(table=table).inc(deleted)
            if deleted < batch:
                break
    return report
