"""The admin's run list neither counts nor sorts the whole runs table (docs/history.md,
"Readers"): at most a bounded count, PostgreSQL's estimate past it, and an index whose order
is the list's."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs import admin_paginator
from tests.support.factories import T0, job_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _runs(count: int) -> None:
    job = job_factory()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                                     state, attempt, epoch, dedup_key, worker,
                                     cancel_requested, last_error, replayed_count, created_at,
                                     finished_at)
            SELECT jobs_run_id(%(t0)s + g * interval '1 minute'), %(job)s, %(tenant)s, 0,
                   %(t0)s + g * interval '1 minute',
                   'schedule', 'succeeded', 1, 0, md5(g::text), '', false, '', 0, %(t0)s, %(t0)s
              FROM generate_series(1, %(count)s) AS g
            """,
            {"job": job.id, "tenant": job.tenant_id, "t0": T0, "count": count},
        )
        cursor.execute("ANALYZE jobs_jobrun")


def _changelist(query: str = "") -> tuple[str, list[str]]:
    # No password: force_login needs none, and hashing one costs a second of CPU.
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("admin:jobs_jobrun_changelist") + query)
    assert response.status_code == 200
    return response.content.decode(), [q["sql"] for q in queries.captured_queries]


def _counts(sqls: list[str]) -> list[str]:
    return [sql for sql in sqls if "COUNT(" in sql.upper() and "jobs_jobrun" in sql]


def test_the_run_list_never_counts_the_whole_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_paginator, "SMALL", 5)
    _runs(40)

    page, sqls = _changelist()

    counts = _counts(sqls)
    assert counts, "the list shows a count"
    # Each count reads at most SMALL + 1 rows; past that the count is PostgreSQL's estimate.
    assert all(re.search(r"LIMIT 6\b", sql) for sql in counts), counts
    assert re.search(r"\b40 job runs\b", page)


def test_a_small_list_is_counted_exactly_read_by_page_and_ordered_as_its_index() -> None:
    _runs(3)

    page, sqls = _changelist()

    assert re.search(r"\b3 job runs\b", page)
    runs = [sql for sql in sqls if "jobs_jobrun" in sql]
    # Each reads a page or a bounded count; none aggregates over the table (a date hierarchy's
    # SELECT DISTINCT date_trunc(...) or MIN/MAX, a full count).
    assert all("LIMIT" in sql or 'INNER JOIN "jobs_job"' in sql for sql in runs), runs
    assert not [sql for sql in runs if "DISTINCT" in sql or "MIN(" in sql], runs
    # The page itself, with each run's job joined in, in the order of run_by_firing.
    (listing,) = [sql for sql in runs if 'INNER JOIN "jobs_job"' in sql]
    order = listing.split("ORDER BY", 1)[1]
    assert re.match(r'\s*"jobs_jobrun"\."scheduled_for" DESC, "jobs_jobrun"\."id" DESC', order)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'run_by_firing'")
        (definition,) = cursor.fetchone() or ("",)
    assert definition.endswith("(scheduled_for DESC, id DESC)"), definition
