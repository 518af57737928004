"""Idempotency keys: derived per firing, recorded when a firing completes."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection

from jobs.models import DedupKey


def dedup_key_for(job_id: uuid.UUID, scheduled_for: datetime) -> str:
    """hash(job id + scheduled instant): the same firing always gets the same key."""
    instant = scheduled_for.astimezone(UTC).isoformat(timespec="microseconds")
    return hashlib.sha256(f"{job_id}|{instant}".encode()).hexdigest()


def dedup_key_sql(job_id: str, scheduled_for: str) -> str:
    """dedup_key_for as a SQL expression over two column expressions (uuid, timestamptz).

    The engine's batch claim derives 50,000 keys in the database rather than in Python (a
    tenth of a spike's Python time, profiled); a test holds both spellings to the same value.
    """
    instant = (
        f"to_char({scheduled_for} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '+00:00'"
    )
    return f"encode(sha256(convert_to({job_id}::text || '|' || {instant}, 'UTF8')), 'hex')"


def dedup_ttl() -> timedelta:
    return timedelta(seconds=settings.SCHEDULER["DEDUP_TTL_S"])


def dedup_record(
    *,
    key: str,
    tenant_id: int,
    job_id: uuid.UUID | None,
    run_id: uuid.UUID | None,
    now: datetime,
    outcome: str = "succeeded",
) -> bool:
    """Record ``key`` as completed; False when it was already recorded (and not expired).

    Runs in the caller's transaction, so a callable that records its key beside its own
    writes commits both or neither. An expired key is replaced rather than blocking forever,
    except one recorded by the same run: a run still live (a retry, a replay) keeps its key
    past ``expires_at`` until its history is purged (jobs/services/history_retention.py).
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_dedupkey (key, tenant_id, job_id, run_id, outcome, created_at,
                                       expires_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (key) DO UPDATE
               SET tenant_id = EXCLUDED.tenant_id, job_id = EXCLUDED.job_id,
                   run_id = EXCLUDED.run_id, outcome = EXCLUDED.outcome,
                   created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
             WHERE jobs_dedupkey.expires_at <= EXCLUDED.created_at
               AND (EXCLUDED.run_id IS NULL
                    OR jobs_dedupkey.run_id IS DISTINCT FROM EXCLUDED.run_id)
            RETURNING key
            """,
            [key, tenant_id, job_id, run_id, outcome, now, now + dedup_ttl()],
        )
        return cursor.fetchone() is not None


def dedup_seen(*, key: str, now: datetime) -> bool:
    return DedupKey.objects.filter(key=key, expires_at__gt=now).exists()


# Expired keys are purged by the beat nodes, never one a live run or a replay still needs
# (jobs/services/history_retention.py).
