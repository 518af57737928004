"""Fencing epochs issued and checked by PostgreSQL (no stale fence, docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import psycopg
from django.db import connection

# One statement both creates the row on first use and bumps it afterwards, so the epoch for a
# partition only ever grows, whatever happened to Redis.
TAKE_EPOCH_SQL = """
INSERT INTO jobs_partitionepoch (partition, epoch, owner, updated_at)
VALUES (%s, 1, %s, %s)
ON CONFLICT (partition) DO UPDATE
   SET epoch = jobs_partitionepoch.epoch + 1, owner = EXCLUDED.owner,
       updated_at = EXCLUDED.updated_at
RETURNING epoch
"""

# epoch_take for several partitions in one statement, in partition order (the fence's lock
# order: a take and a claim overlapping on some partitions never deadlock). A partition whose
# row another transaction holds is left out rather than waited for (SKIP LOCKED): that is a
# previous owner's claim still in flight, or one frozen mid-claim until PostgreSQL ends its
# session (docs/engine.md, "A frozen node"); the caller asks again at its next hand-over retry
# and meanwhile goes on with its other partitions. A partition without a row yet is inserted.
TAKE_EPOCHS_SQL = """
WITH wanted AS (SELECT p FROM unnest(%s::int[]) AS p),
free AS (
    SELECT partition FROM jobs_partitionepoch
     WHERE partition IN (SELECT p FROM wanted)
     ORDER BY partition
       FOR UPDATE SKIP LOCKED)
INSERT INTO jobs_partitionepoch (partition, epoch, owner, updated_at)
SELECT w.p, 1, %s, %s FROM wanted w
 WHERE w.p IN (SELECT partition FROM free)
    OR NOT EXISTS (SELECT 1 FROM jobs_partitionepoch e WHERE e.partition = w.p)
 ORDER BY w.p
ON CONFLICT (partition) DO UPDATE
   SET epoch = jobs_partitionepoch.epoch + 1, owner = EXCLUDED.owner,
       updated_at = EXCLUDED.updated_at
RETURNING partition, epoch
"""

# A hand-over: the old owner bumps the epoch of each partition it still holds at its epoch
# (a compare-and-set) and names the new owner, before the lease key moves. From that commit
# on, anything it still tries under its old epoch is refused (no stale fence,
# docs/architecture.md, Invariants), whatever the lease key says.
HAND_OVER_SQL = """
UPDATE jobs_partitionepoch pe
   SET epoch = pe.epoch + 1, owner = m.target, updated_at = %s
  FROM unnest(%s::int[], %s::bigint[], %s::text[]) AS m(partition, epoch, target)
 WHERE pe.partition = m.partition AND pe.epoch = m.epoch
   AND pe.partition IN (
       SELECT l.partition FROM jobs_partitionepoch l
         JOIN unnest(%s::int[], %s::bigint[]) AS mine(partition, epoch)
           ON l.partition = mine.partition AND l.epoch = mine.epoch
        ORDER BY l.partition
          FOR UPDATE OF l)
RETURNING pe.partition
"""

# Lock the rows in partition order (two nodes overlapping during a handover never deadlock),
# then touch them; only the partitions whose stored epoch is still ours come back.
FENCE_SQL = """
UPDATE jobs_partitionepoch SET updated_at = %s
 WHERE partition IN (
       SELECT pe.partition FROM jobs_partitionepoch pe
         JOIN unnest(%s::int[], %s::bigint[]) AS mine(partition, epoch)
           ON pe.partition = mine.partition AND pe.epoch = mine.epoch
        ORDER BY pe.partition
          FOR UPDATE OF pe)
RETURNING partition
"""


def epoch_take(*, partition: int, node: str, now: datetime) -> int:
    """A new epoch for ``partition``, strictly larger than any issued before."""
    with connection.cursor() as cursor:
        cursor.execute(TAKE_EPOCH_SQL, [partition, node, now])
        row = cursor.fetchone()
        assert row is not None
        return int(row[0])


def epochs_take(partitions: list[int], *, node: str, now: datetime) -> dict[int, int]:
    """A new epoch for each of ``partitions`` (as epoch_take), in one round trip; a partition
    whose epoch row another transaction holds is left out of the result, not waited for."""
    if not partitions:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(TAKE_EPOCHS_SQL, [sorted(partitions), node, now])
        return {int(p): int(e) for p, e in cursor.fetchall()}


def epochs_hand_over(
    epochs: Mapping[int, int], targets: Mapping[int, str], *, now: datetime
) -> frozenset[int]:
    """Supersede our ``epochs`` in favour of ``targets`` (partition -> node); returns the
    partitions whose epoch was still ours, and so was superseded by this call."""
    if not epochs:
        return frozenset()
    parts = sorted(epochs)
    mine = [epochs[p] for p in parts]
    with connection.cursor() as cursor:
        cursor.execute(HAND_OVER_SQL, [now, parts, mine, [targets[p] for p in parts], parts, mine])
        return frozenset(int(row[0]) for row in cursor.fetchall())


def fence(epochs: Mapping[int, int], *, now: datetime) -> frozenset[int]:
    """Lock and confirm the partitions whose stored epoch is still ours, in this transaction.

    Call it first inside the claim or timer transaction: the row locks are held to commit, so
    a newer owner's epoch_take waits for us and everything we write counts as done before it.
    """
    if not epochs:
        return frozenset()
    parts = sorted(epochs)
    with connection.cursor() as cursor:
        cursor.execute(FENCE_SQL, [now, parts, [epochs[p] for p in parts]])
        return frozenset(int(row[0]) for row in cursor.fetchall())


def epochs_current(epochs: Mapping[int, int]) -> frozenset[int]:
    """Which of our epochs are still the stored ones, without locking (a pre-publish check)."""
    if not epochs:
        return frozenset()
    parts = sorted(epochs)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT pe.partition FROM jobs_partitionepoch pe
              JOIN unnest(%s::int[], %s::bigint[]) AS mine(partition, epoch)
                ON pe.partition = mine.partition AND pe.epoch = mine.epoch
            """,
            [parts, [epochs[p] for p in parts]],
        )
        return frozenset(int(row[0]) for row in cursor.fetchall())


def server_cursor() -> AbstractContextManager[psycopg.Cursor[Any]]:
    """A psycopg cursor with server-side binding on Django's connection (same transaction).

    Django's default client-side binding quotes every array element in Python; for the
    50,000-element arrays of a spike that was a third of the claim time (profiled).
    """
    connection.ensure_connection()
    raw = connection.connection
    assert isinstance(raw, psycopg.Connection)
    return psycopg.Cursor(raw)
