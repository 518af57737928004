"""The claim derives dedup keys in SQL: both spellings must give the same key for a firing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django.db import connection

from jobs.services.dedup import dedup_key_for, dedup_key_sql

pytestmark = pytest.mark.django_db

INSTANTS = [
    datetime(2026, 11, 30, 0, 0, tzinfo=UTC),  # whole second: Python still prints .000000
    datetime(2026, 11, 30, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2028, 2, 29, 12, 0, 0, 1, tzinfo=UTC),
    # Offsets other than UTC are the same instant, hence the same key.
    datetime(2026, 3, 29, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),
    datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
    datetime(2026, 6, 1, 9, 15, 30, 500_000, tzinfo=timezone(timedelta(hours=5, minutes=45))),
]


@pytest.mark.parametrize("instant", INSTANTS, ids=lambda i: i.isoformat())
def test_sql_dedup_key_equals_python(instant: datetime) -> None:
    job_id = uuid.uuid4()
    with connection.cursor() as cursor:
        # A session time zone far from UTC: the SQL must not depend on it.
        cursor.execute("SET LOCAL TIME ZONE 'Pacific/Chatham'")
        cursor.execute(f"SELECT {dedup_key_sql('%s::uuid', '%s::timestamptz')}", [job_id, instant])
        (key,) = cursor.fetchone()
    assert key == dedup_key_for(job_id, instant)
    assert len(key) == 64
