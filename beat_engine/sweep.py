"""The outbox sweep: queued runs whose message may be lost, read from PostgreSQL.

Redis is a hint (docs/architecture.md, Invariants): whatever the broker lost, the runs are
still queued here. Two kinds are swept, each from its own partial index, oldest first:

* queued and never marked published for ``unpublished_after`` (the push failed, or the node
  died between its claim and its push or mark): sent again;
* marked published ``republish_after`` ago or more and still not started: sent again only if
  their message no longer waits in the broker (beat_engine/broker_ledger.py); the rest are
  re-stamped and looked at again ``republish_after`` later.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from beat_engine.broker_ledger import Sent
from beat_engine.publisher import QueuedRun, queue_key
from beat_engine.timers import bound_params
from jobs.states import RunState

_QUEUED = RunState.QUEUED.value
# Only runs fired from the live floor on (beat_engine/live_floor.py), named parameters.
_BOUND = (
    "(%(since)s::timestamptz IS NULL"
    " OR (scheduled_for >= %(since)s::timestamptz AND id >= %(since_id)s::uuid))"
)

# One round trip, one index range per branch (run_unpublished_by_partition,
# run_sent_unstarted), then the job's queue and priority by primary key for the runs kept
# (a LATERAL with LIMIT is never flattened into a join: with 50,000 jobs PostgreSQL hashed all
# of jobs_job for 1,000 runs). docs/engine.md "Sweep" shows the plan. No row locks: the sweep
# writes nothing here, and a run started meanwhile only makes a message the worker's
# compare-and-set drops.
SWEEP_SQL = f"""
SELECT r.id, r.attempt, r.partition, j.queue, j.priority, r.published_at
  FROM (SELECT * FROM ((SELECT id, job_id, attempt, partition, published_at, queued_at AS since
                          FROM jobs_jobrun
                         WHERE partition = ANY(%(partitions)s::int[]) AND state = '{_QUEUED}'
                           AND published_at IS NULL AND queued_at <= %(unpublished_before)s
                           AND {_BOUND}
                         ORDER BY queued_at
                         LIMIT %(limit)s)
                       UNION ALL
                       (SELECT id, job_id, attempt, partition, published_at, published_at
                          FROM jobs_jobrun
                         WHERE partition = ANY(%(partitions)s::int[]) AND state = '{_QUEUED}'
                           AND published_at IS NOT NULL AND published_at <= %(published_before)s
                           AND {_BOUND}
                         ORDER BY published_at
                         LIMIT %(limit)s)) both_kinds
         ORDER BY since
         LIMIT %(limit)s) r
 CROSS JOIN LATERAL (SELECT queue, priority FROM jobs_job WHERE id = r.job_id LIMIT 1) j
"""


@dataclass(frozen=True)
class Swept:
    """A queued run the sweep found, with the ``published_at`` it holds (None: never marked)."""

    run: QueuedRun
    published_at: datetime | None

    def sent(self) -> Sent | None:
        if self.published_at is None:
            return None
        key = queue_key(self.run.queue, self.run.priority)
        return Sent(self.run.run_id, key, self.published_at)


def sweep_params(
    partitions: Sequence[int],
    *,
    now: datetime,
    unpublished_after: timedelta,
    republish_after: timedelta,
    limit: int,
    since: datetime | None = None,
) -> dict[str, Any]:
    _, since, since_id = bound_params(since)
    return {
        "partitions": list(partitions),
        "unpublished_before": now - unpublished_after,
        "published_before": now - republish_after,
        "limit": limit,
        "since": since,
        "since_id": since_id,
    }


def sweep_lost_publishes(
    partitions: Sequence[int],
    *,
    now: datetime,
    unpublished_after: timedelta,
    republish_after: timedelta,
    limit: int,
    since: datetime | None = None,
) -> list[Swept]:
    """Queued runs never marked published for ``unpublished_after``, or marked published
    ``republish_after`` ago and never started: at most ``limit``, oldest first; with
    ``since``, only those fired from then on (beat_engine/live_floor.py)."""
    if not partitions:
        return []
    params = sweep_params(
        partitions,
        now=now,
        unpublished_after=unpublished_after,
        republish_after=republish_after,
        limit=limit,
        since=since,
    )
    with connection.cursor() as cursor:
        cursor.execute(SWEEP_SQL, params)
        return [
            Swept(QueuedRun(row[0], row[1], row[2], row[3], row[4]), row[5])
            for row in cursor.fetchall()
        ]


# Runs a partition's last owner claimed ahead and did not push (docs/engine.md, "Claim
# ahead"): queued from their instant on, still to come. The same partial index as the sweep's
# first branch (run_unpublished_by_partition), read from the other end of queued_at.
CLAIMED_AHEAD_SQL = f"""
SELECT r.id, r.attempt, r.partition, j.queue, j.priority, r.due_at, r.tenant_id, r.job_id
  FROM (SELECT id, job_id, attempt, partition, due_at, tenant_id, queued_at
          FROM jobs_jobrun
         WHERE partition = ANY(%(partitions)s::int[]) AND state = '{_QUEUED}'
           AND published_at IS NULL AND queued_at > %(now)s
         ORDER BY queued_at
         LIMIT %(limit)s) r
 CROSS JOIN LATERAL (SELECT queue, priority FROM jobs_job WHERE id = r.job_id LIMIT 1) j
 ORDER BY r.queued_at
"""


def claimed_ahead(
    partitions: Sequence[int], *, now: datetime, limit: int
) -> list[tuple[QueuedRun, uuid.UUID]]:
    """Unpushed runs of ``partitions`` claimed ahead of an instant after ``now``, earliest
    first, at most ``limit``, each with its job."""
    if not partitions:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIMED_AHEAD_SQL, {"partitions": list(partitions), "now": now, "limit": limit}
        )
        return [
            (QueuedRun(row[0], row[1], row[2], row[3], row[4], row[5], row[6]), row[7])
            for row in cursor.fetchall()
        ]
