"""Selection: page jobs due within the look-ahead horizon from the (partition, next_fire_at)
index, never scanning every job."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection

from beat_engine.heap import DueEntry
from beat_engine.jitter import jitter_offset

# A LATERAL per partition so each page is an index range scan on job_due_keyset, from the
# partition's loaded_until on, or from the row a full page ended at: the keyset
# (next_fire_at, id) goes on through jobs tied at one instant. Without a row to resume from the
# greatest uuid stands for it, so that the bound stays one sargable row comparison.
HORIZON_SQL = """
SELECT j.id, j.partition, j.next_fire_at, j.jitter_window, j.tenant_id, j.priority
  FROM unnest(%s::int[], %s::timestamptz[], %s::uuid[]) AS p(partition, after, after_id)
 CROSS JOIN LATERAL (
       SELECT id, partition, next_fire_at, jitter_window, tenant_id, priority FROM jobs_job
        WHERE status = 'active' AND partition = p.partition
          AND (next_fire_at, id) > (coalesce(p.after, '-infinity'),
                                    coalesce(p.after_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
          AND next_fire_at <= %s
        ORDER BY next_fire_at, id
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
    # Per partition whose page was full, its last row (next_fire_at, id): every due job up to
    # it, ties included, is in ``entries``; the next page resumes after it.
    resume: dict[int, tuple[datetime, uuid.UUID]] = field(default_factory=dict)


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
    resume: Mapping[int, tuple[datetime, uuid.UUID]] | None = None,
) -> HorizonPage:
    """Jobs of ``partitions`` whose next firing is at or before ``until`` (and after
    ``after[p]`` when given: an incremental load; after the row ``resume[p]`` when given: the
    next page), at most ``page`` per partition, in (next_fire_at, id) order; a full page
    lowers that partition's loaded_until to its last row and names that row in ``resume``."""
    parts = sorted(partitions)
    if not parts:
        return HorizonPage([], {})
    since: list[datetime | None] = []
    since_id: list[uuid.UUID | None] = []
    for p in parts:
        row = None if resume is None else resume.get(p)
        since.append(row[0] if row else None if after is None else after.get(p))
        since_id.append(row[1] if row else None)
    with connection.cursor() as cursor:
        cursor.execute(HORIZON_SQL, [parts, since, since_id, until, page])
        rows = cursor.fetchall()
    entries: list[DueEntry] = []
    counts: dict[int, int] = dict.fromkeys(parts, 0)
    last: dict[int, tuple[datetime, uuid.UUID]] = {}
    for row in rows:
        entry = _entry(row)
        entries.append(entry)
        counts[entry.partition] += 1
        fired = row[2]
        assert isinstance(fired, datetime)
        key = (fired, entry.job_id)  # (next_fire_at, id): the keyset's order
        if entry.partition not in last or key > last[entry.partition]:
            last[entry.partition] = key
    full = {p: last[p] for p in parts if counts[p] >= page}
    loaded = {
        # Rows tied with the last one may be cut off: trust the page only strictly before it.
        p: (full[p][0] - timedelta(microseconds=1) if p in full else until)
        for p in parts
    }
    # Entries past a cut-off are kept: an entry in the heap is never wrong, the claim re-checks.
    return HorizonPage(entries, loaded, full)


def load_jobs(job_ids: Iterable[uuid.UUID]) -> list[DueEntry]:
    """Current due entries of these jobs (changed through the API); inactive ones are absent."""
    ids = list(job_ids)
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(JOBS_SQL, [ids])
        return [_entry(row) for row in cursor.fetchall()]
