"""Sustained lateness per tenant: found by a periodic check, recorded and notified once per
window (docs/operations.md, "Notifications").

The check reads the runs created in the last window (the BRIN index run_created_brin keeps that
a read of the table's newest pages) and takes each tenant's p99 of ``lateness`` (due → in the
broker). A tenant above the threshold, on at least a minimum number of runs, gets one
LatenessAlert row for the window and one delivery per subscribed webhook, in one statement;
the unique (tenant, window_start) makes a second check in the same window, from this node or
another, record nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from jobs.models_notifications import DeliveryState, NotificationEvent

_EVENT = NotificationEvent.SUSTAINED_LATENESS.value

CHECK_SQL = f"""
WITH recent AS (
    SELECT tenant_id, count(*) AS runs,
           percentile_disc(0.99) WITHIN GROUP (ORDER BY lateness) AS p99
      FROM jobs_jobrun
     WHERE created_at > %(since)s AND created_at <= %(now)s AND lateness IS NOT NULL
     GROUP BY tenant_id
), alerts AS (
    INSERT INTO jobs_latenessalert (tenant_id, window_start, p99_s, runs, created_at)
    SELECT tenant_id, %(window)s, extract(epoch FROM p99), runs, %(now)s
      FROM recent
     WHERE p99 > %(threshold)s * interval '1 second' AND runs >= %(min_runs)s
    ON CONFLICT (tenant_id, window_start) DO NOTHING
    RETURNING tenant_id, p99_s, runs
), deliveries AS (
    INSERT INTO jobs_notificationdelivery (id, webhook_id, tenant_id, event, event_key, payload,
        state, attempts, next_attempt_at, claimed_until, last_status, last_error, created_at,
        delivered_at)
    SELECT gen_random_uuid(), w.id, a.tenant_id, '{_EVENT}',
           '{_EVENT}:' || to_char(%(window)s::timestamptz AT TIME ZONE 'UTC',
                                  'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           jsonb_build_object(
               'event', '{_EVENT}', 'tenant', t.name, 'window_start', %(window)s::timestamptz,
               'window_s', %(window_s)s, 'lateness_p99_s', a.p99_s, 'threshold_s', %(threshold)s,
               'runs', a.runs, 'detected_at', %(now)s::timestamptz),
           '{DeliveryState.PENDING.value}', 0, %(now)s, NULL, NULL, '', %(now)s, NULL
      FROM alerts a
      JOIN jobs_tenant t ON t.id = a.tenant_id
      JOIN jobs_notificationwebhook w
        ON w.tenant_id = a.tenant_id AND w.enabled AND '{_EVENT}' = ANY(w.events)
    ON CONFLICT (webhook_id, event_key) DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM alerts), (SELECT count(*) FROM deliveries)
"""


@dataclass(frozen=True)
class LatenessCheck:
    alerts: int
    deliveries: int


def window_start(now: datetime, window: timedelta) -> datetime:
    """The start of the fixed window holding ``now`` (windows aligned on the Unix epoch)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - epoch) // window) * window


def lateness_check(
    *,
    now: datetime,
    threshold_s: float | None = None,
    window: timedelta | None = None,
    min_runs: int | None = None,
) -> LatenessCheck:
    """Record this window's alert for every tenant whose p99 lateness over the last window is
    above the threshold; ``now`` is the database's clock."""
    sched = settings.SCHEDULER
    window = window or timedelta(seconds=float(sched["LATENESS_ALERT_WINDOW_S"]))
    params: dict[str, Any] = {
        "now": now,
        "since": now - window,
        "window": window_start(now, window),
        "window_s": window.total_seconds(),
        "threshold": float(threshold_s if threshold_s is not None else sched["LATENESS_ALERT_S"]),
        "min_runs": int(min_runs if min_runs is not None else sched["LATENESS_ALERT_MIN_RUNS"]),
    }
    with connection.cursor() as cursor:
        cursor.execute(CHECK_SQL, params)
        row = cursor.fetchone()
    assert row is not None
    return LatenessCheck(alerts=int(row[0]), deliveries=int(row[1]))
