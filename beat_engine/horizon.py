"""Selection: page jobs due within the look-ahead horizon from the (partition, next_fire_at)
index, never scanning every job."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection

from beat_engine.heap import DueEntry
from beat_engine.jitter import jitter_offset

# A LATERAL per partition so each page is an index range scan on job_due_by_partition,
# from the partition's loaded_until on (coalesce keeps the lower bound sargable).
HORIZON_SQL = """
SELECT j.id, j.partition, j.next_fire_at, j.jitter_window, j.tenant_id, j.priority
  FROM unnest(%s::int[], %s::timestamptz[]) AS p(partition, after)
 CROSS JOIN LATERAL (
       SELECT id, partition, next_fire_at, jitter_window, tenant_id, priority FROM jobs_job
        WHERE status = 'active' AND partition = p.partition
          AND next_fire_at > coalesce(p.after, '-infinity') AND next_fire_at <= %s
        ORDER BY next_fire_at
        LIMIT %s) AS j
"""

JOBS_SQL = """
SELECT id, partition, next_fire_at, jitter_window, tenant_id, priority FROM jobs_job
 WHERE id = ANY(%s::uuid[]) AND status = 'active' AND next_fire_at IS NOT NULL
"""


@dataclass(frozen=True)
class HorizonPage:
    entries: list[DueEntry]
    # Per partition, the instant up to which every due job is in ``entries``.
    loaded_until: dict[int, datetime]


def _entry(row: Sequence[object]) -> DueEntry:
    job_id, partition, next_fire_at, window, tenant, priority = row
    assert isinstance(job_id, uuid.UUID)
    assert isinstance(priority, int)
    assert isinstance(partition, int)
    assert isinstance(next_fire_at, datetime)
    assert isinstance(tenant, int)
    offset = jitter_offset(job_id, window) if isinstance(window, timedelta) else timedelta(0)
    return DueEntry(
        next_fire_at + offset, job_id, partition, tenant, fire_at=next_fire_at, priority=priority
    )


def load_horizon(
    partitions: Iterable[int],
    *,
    until: datetime,
    page: int,
    after: Mapping[int, datetime] | None = None,
) -> HorizonPage:
    """Jobs of ``partitions`` whose next firing is at or before ``until`` (and after
    ``after[p]`` when given: an incremental load), at most ``page`` per partition; a full page
    lowers that partition's loaded_until to its last row."""
    parts = sorted(partitions)
    if not parts:
        return HorizonPage([], {})
    since = [None if after is None else after.get(p) for p in parts]
    with connection.cursor() as cursor:
        cursor.execute(HORIZON_SQL, [parts, since, until, page])
        rows = cursor.fetchall()
    entries: list[DueEntry] = []
    counts: dict[int, int] = dict.fromkeys(parts, 0)
    last: dict[int, datetime] = {}
    for row in rows:
        entries.append(_entry(row))
        counts[row[1]] += 1
        last[row[1]] = max(last.get(row[1], row[2]), row[2])
    loaded = {
        # Rows tied with the last one may be cut off: trust the page only strictly before it.
        p: (last[p] - timedelta(microseconds=1) if counts[p] >= page else until)
        for p in parts
    }
    # Entries past a cut-off are kept: an entry in the heap is never wrong, the claim re-checks.
    return HorizonPage(entries, loaded)


def load_jobs(job_ids: Iterable[uuid.UUID]) -> list[DueEntry]:
    """Current due entries of these jobs (changed through the API); inactive ones are absent."""
    ids = list(job_ids)
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(JOBS_SQL, [ids])
        return [_entry(row) for row in cursor.fetchall()]
