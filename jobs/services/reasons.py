"""Retention of decision reasons, job events, notification deliveries and lateness alerts
(docs/operations.md, "Reasons" and "Notifications")."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

# Oldest first, a bounded batch per statement, each by its own time index: a purge after a
# long retention change deletes in slices instead of holding one long transaction.
_PURGE_SQL = {
    "jobs_decisionreason": """
        DELETE FROM jobs_decisionreason WHERE id IN (
            SELECT id FROM jobs_decisionreason WHERE updated_at < %s
             ORDER BY updated_at LIMIT %s)""",
    "jobs_jobevent": """
        DELETE FROM jobs_jobevent WHERE id IN (
            SELECT id FROM jobs_jobevent WHERE at < %s ORDER BY at LIMIT %s)""",
    # Notification deliveries (sent, failed, or pending past the retention: no receiver
    # wants a month-old alert) and lateness alerts, on the same retention.
    "jobs_notificationdelivery": """
        DELETE FROM jobs_notificationdelivery WHERE id IN (
            SELECT id FROM jobs_notificationdelivery WHERE created_at < %s
             ORDER BY created_at LIMIT %s)""",
    "jobs_latenessalert": """
        DELETE FROM jobs_latenessalert WHERE id IN (
            SELECT id FROM jobs_latenessalert WHERE created_at < %s
             ORDER BY created_at LIMIT %s)""",
}


def reason_retention() -> timedelta:
    return timedelta(days=settings.SCHEDULER["REASON_RETENTION_DAYS"])


def reasons_purge(
    *, now: datetime, retention: timedelta | None = None, limit: int = 10_000
) -> dict[str, int]:
    """Delete reasons last updated, and job events, deliveries and lateness alerts recorded,
    more than ``retention`` before ``now`` (the database's clock); at most ``limit`` rows of
    each table per call."""
    cutoff = now - (retention if retention is not None else reason_retention())
    deleted: dict[str, int] = {}
    with connection.cursor() as cursor:
        for table, sql in _PURGE_SQL.items():
            cursor.execute(sql, [cutoff, limit])
            deleted[table] = cursor.rowcount
    return deleted
