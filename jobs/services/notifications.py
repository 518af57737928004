"""Notification deliveries: recorded with the event, sent later by the beat nodes.

Recording is one set-based INSERT … SELECT in the transaction that decides the event (a run
moving to dead, a lateness window found late), one row per subscribed webhook and nothing for
a tenant without webhooks; the unique ``(webhook, event_key)`` keeps it once per event.
Sending is ``deliver_due``: the beat nodes' delivery thread (beat_engine/webhook_sender.py)
takes due rows under a short claim and POSTs them through the HTTP target machinery
(jobs/http_client.py: the SSRF policy checked again at send time, the validated address
pinned, no redirects, a bounded read), retrying with backoff. The worker that dead-letters a
run never waits for a receiver.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from beat_engine.backoff import RetryPolicy, retry_delay
from beat_engine.pg_arrays import int_array, text_array, uuid_array
from jobs.errors import InvalidInput
from jobs.http_client import HttpCall, HttpTimeout
from jobs.models_notifications import DeliveryState, NotificationEvent
from jobs.services.webhooks import SIGNATURE_HEADER, webhook_secret, webhook_signature

logger = logging.getLogger(__name__)

_COLUMNS = """id, webhook_id, tenant_id, event, event_key, payload, state, attempts,
              next_attempt_at, claimed_until, last_status, last_error, created_at, delivered_at"""

DEAD_LETTER_SQL = f"""
INSERT INTO jobs_notificationdelivery ({_COLUMNS})
SELECT gen_random_uuid(), w.id, w.tenant_id, '{NotificationEvent.DEAD_LETTER.value}',
       'dead_letter:' || r.id || ':' || r.replayed_count,
       jsonb_build_object(
           'event', '{NotificationEvent.DEAD_LETTER.value}', 'tenant', t.name,
           'job_id', j.id, 'job_name', j.name, 'run_id', r.id,
           'scheduled_for', r.scheduled_for, 'attempts', d.attempts,
           'error', left(d.error, 1000), 'moved_at', %(now)s::timestamptz),
       '{DeliveryState.PENDING.value}', 0, %(now)s, NULL, NULL, '', %(now)s, NULL
  FROM unnest(%(runs)s::uuid[], %(attempts)s::int[], %(errors)s::text[])
       AS d(run_id, attempts, error)
  JOIN jobs_jobrun r ON r.id = d.run_id
  JOIN jobs_notificationwebhook w
    ON w.tenant_id = r.tenant_id AND w.enabled
   AND '{NotificationEvent.DEAD_LETTER.value}' = ANY(w.events)
  JOIN jobs_job j ON j.id = r.job_id
  JOIN jobs_tenant t ON t.id = r.tenant_id
ON CONFLICT (webhook_id, event_key) DO NOTHING
"""

# Due rows, oldest first, claimed for claim_s; SKIP LOCKED so two nodes take different rows.
# A row whose claim expired (its node died mid-send) is due again.
CLAIM_SQL = f"""
UPDATE jobs_notificationdelivery d
   SET claimed_until = %(until)s, attempts = d.attempts + 1
  FROM jobs_notificationwebhook w
 WHERE w.id = d.webhook_id AND d.id IN (
       SELECT id FROM jobs_notificationdelivery
        WHERE state = '{DeliveryState.PENDING.value}' AND next_attempt_at <= %(now)s
          AND (claimed_until IS NULL OR claimed_until < %(now)s)
        ORDER BY next_attempt_at
        LIMIT %(limit)s
          FOR UPDATE SKIP LOCKED)
RETURNING d.id, d.event, d.payload, d.attempts, w.id, w.url, w.secret_version, w.enabled
"""

DUE_SQL = f"""
SELECT 1 FROM jobs_notificationdelivery
 WHERE state = '{DeliveryState.PENDING.value}' AND next_attempt_at <= %s
   AND (claimed_until IS NULL OR claimed_until < %s)
 LIMIT 1
"""

# Fenced on the attempt number: a node whose claim expired and was taken over writes nothing.
FINISH_SQL = """
UPDATE jobs_notificationdelivery
   SET state = %(state)s, claimed_until = NULL, next_attempt_at = %(next)s,
       last_status = %(status)s, last_error = %(error)s, delivered_at = %(delivered)s
 WHERE id = %(id)s AND attempts = %(attempt)s AND state = 'pending'
"""


@dataclass(frozen=True)
class DeadLetterFact:
    run_id: uuid.UUID
    attempts: int
    error: str


def notify_dead_letters(facts: Sequence[DeadLetterFact], *, now: datetime) -> None:
    """Record a delivery per subscribed webhook for each dead-lettered run, in the caller's
    transaction (the one that moved the runs to dead)."""
    if not facts:
        return
    params: dict[str, Any] = {
        "runs": uuid_array([f.run_id for f in facts]),
        "attempts": int_array([f.attempts for f in facts]),
        "errors": text_array([f.error[:1000] for f in facts]),
        "now": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(DEAD_LETTER_SQL, params)


@dataclass(frozen=True)
class _Claimed:
    id: uuid.UUID
    event: str
    payload: Any
    attempt: int
    webhook_id: uuid.UUID
    url: str
    secret_version: int
    enabled: bool


def _policy() -> RetryPolicy:
    sched = settings.SCHEDULER
    return RetryPolicy(
        max_attempts=int(sched["WEBHOOK_MAX_ATTEMPTS"]),
        base_delay=timedelta(seconds=float(sched["WEBHOOK_RETRY_BASE_S"])),
        max_delay=timedelta(seconds=float(sched["WEBHOOK_RETRY_MAX_S"])),
    )


def deliveries_due(*, now: datetime) -> bool:
    """Whether any delivery is due (one probe of delivery_pending_due)."""
    with connection.cursor() as cursor:
        cursor.execute(DUE_SQL, [now, now])
        return cursor.fetchone() is not None


def deliver_due(*, now: datetime, limit: int = 20, rng: random.Random | None = None) -> int:
    """Send up to ``limit`` due deliveries; returns how many were taken."""
    timeout_s = float(settings.SCHEDULER["WEBHOOK_TIMEOUT_S"])
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_SQL,
            {"now": now, "until": now + timedelta(seconds=3 * timeout_s + 5), "limit": limit},
        )
        claimed = [_Claimed(*row) for row in cursor.fetchall()]
    for item in claimed:
        _deliver(item, now=now, timeout_s=timeout_s, rng=rng or random.Random())
    return len(claimed)


def _deliver(item: _Claimed, *, now: datetime, timeout_s: float, rng: random.Random) -> None:
    payload = item.payload if isinstance(item.payload, dict) else json.loads(item.payload)
    status: int | None = None
    if not item.enabled:
        _finish(item, DeliveryState.FAILED, now=now, error="webhook disabled")
        return
    # Serialised exactly as HttpCall.post_json sends it, so the signature covers the bytes sent.
    body = json.dumps(payload, allow_nan=False).encode()
    stamp = int(now.timestamp())
    headers = {
        SIGNATURE_HEADER: webhook_signature(
            webhook_secret(item.webhook_id, item.secret_version), stamp, body
        ),
        "X-Scheduler-Event": item.event,
        "X-Scheduler-Delivery": str(item.id),
        "User-Agent": "scheduler-webhooks/1",
    }
    try:
        response = HttpCall().post_json(
            item.url, payload, headers=headers, timeout_s=timeout_s, max_bytes=1024
        )
        status = response.status
        error = "" if 200 <= status < 300 else f"HTTP {status}"
    except InvalidInput as exc:
        # The SSRF policy refuses the address now (the name moved to a private address):
        # permanent until someone changes the URL.
        _finish(item, DeliveryState.FAILED, now=now, error=f"refused: {exc.message}")
        return
    except (HttpTimeout, OSError, http.client.HTTPException) as exc:
        error = f"{type(exc).__name__}: {exc}"
    if not error:
        _finish(item, DeliveryState.DELIVERED, now=now, status=status)
        return
    policy = _policy()
    if item.attempt >= policy.max_attempts:
        _finish(item, DeliveryState.FAILED, now=now, status=status, error=error)
        return
    delay = retry_delay(item.attempt, policy, rng)
    _finish(item, DeliveryState.PENDING, now=now, status=status, error=error, next_at=now + delay)
    logger.info(
        "notifications.retry",
        extra={"delivery": str(item.id), "attempt": item.attempt, "error": error},
    )


def _finish(
    item: _Claimed,
    state: DeliveryState,
    *,
    now: datetime,
    status: int | None = None,
    error: str = "",
    next_at: datetime | None = None,
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            FINISH_SQL,
            {
                "state": state.value,
                "next": next_at or now,
                "status": status,
                "error": error[:500],
                "delivered": now if state == DeliveryState.DELIVERED else None,
                "id": item.id,
                "attempt": item.attempt,
            },
        )
