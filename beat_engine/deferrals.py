"""Tenant-limit deferrals, aggregated in memory and written as one statement every few seconds.

A firing held back by its tenant's max_queued_runs is looked at again every second
(claims.QUOTA_RETRY); writing a row per look would add a write per deferred job per second to
the claim path exactly when the database is busiest. Instead each node counts the looks per
(job, firing) and upserts the totals into one DecisionReason row per firing
(docs/operations.md, "Reasons"), off the claim transaction. A crash loses at most the counts
of one flush interval: the reason is informational, the firing itself is still due.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connection

from beat_engine.pg_arrays import int_array, timestamp_array, uuid_array
from jobs.models_reasons import ReasonKind

logger = logging.getLogger("beat_engine")

# JOIN jobs_job: a job deleted since its deferral is skipped instead of failing the statement.
UPSERT_SQL = f"""
INSERT INTO jobs_decisionreason (job_id, tenant_id, kind, first_at, last_at, count,
                                 recorded_at, updated_at, detail)
SELECT d.job_id, j.tenant_id, '{ReasonKind.DEFERRED_TENANT_LIMIT.value}', d.fire_at, d.fire_at,
       d.looks, d.first_seen, d.last_seen, 'tenant at max_queued_runs'
  FROM unnest(%s::uuid[], %s::timestamptz[], %s::bigint[], %s::timestamptz[], %s::timestamptz[])
       AS d(job_id, fire_at, looks, first_seen, last_seen)
  JOIN jobs_job j ON j.id = d.job_id
ON CONFLICT (job_id, kind, first_at) DO UPDATE
   SET count = jobs_decisionreason.count + EXCLUDED.count,
       recorded_at = LEAST(jobs_decisionreason.recorded_at, EXCLUDED.recorded_at),
       updated_at = GREATEST(jobs_decisionreason.updated_at, EXCLUDED.updated_at)
"""


@dataclass
class _Seen:
    looks: int
    first: datetime
    last: datetime


class DeferralLog:
    """Counts of deferred looks per (job, firing) since the last flush; bounded by the number
    of deferred firings (at most one entry per job, since a job waits at one firing)."""

    def __init__(self, *, max_entries: int = 100_000) -> None:
        self._seen: dict[tuple[uuid.UUID, datetime], _Seen] = {}
        self._max_entries = max_entries
        self.dropped = 0

    def add(
        self, firings: Iterable[tuple[uuid.UUID, int, int, datetime]], *, now: datetime
    ) -> None:
        for job_id, _tenant, _partition, fire_at in firings:
            key = (job_id, fire_at)
            seen = self._seen.get(key)
            if seen is not None:
                seen.looks += 1
                seen.last = now
            elif len(self._seen) < self._max_entries:
                self._seen[key] = _Seen(1, now, now)
            else:
                self.dropped += 1

    @property
    def pending(self) -> int:
        return len(self._seen)

    def flush(self) -> int:
        """Write the counts (one statement, autocommit); on a database error they are kept
        for the next flush. Returns the number of firings written."""
        if not self._seen:
            return 0
        items = sorted(self._seen.items(), key=lambda kv: (kv[0][0], kv[0][1]))
        params = [
            uuid_array([k[0] for k, _ in items]),
            timestamp_array([k[1] for k, _ in items]),
            int_array([s.looks for _, s in items]),
            timestamp_array([s.first for _, s in items]),
            timestamp_array([s.last for _, s in items]),
        ]
        try:
            with connection.cursor() as cursor:
                cursor.execute(UPSERT_SQL, params)
        except DatabaseError:
            logger.warning(
                "beat.deferrals_not_recorded", extra={"firings": len(items)}, exc_info=True
            )
            return 0
        self._seen.clear()
        return len(items)
