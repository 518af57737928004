"""The horizon's pages are index range scans on the keyset (next_fire_at, id), through jobs
tied at one instant as well: a page resuming inside a tie of 20,000 jobs reads its page, not
the tie's rows before it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from beat_engine.horizon import HORIZON_SQL, load_horizon
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.plans import copy_job, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIE = 20_000
INSTANT = T0 + timedelta(seconds=20)


@pytest.fixture
def tie() -> None:
    job = job_factory(tenant_factory(), interval=timedelta(hours=1), anchor_at=T0)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET partition = 1 WHERE id = %s", [job.id])
    # Copies of the job, all in partition 0 and due at one instant (a minute boundary's crons).
    copy_job(job.id, TIE, partition=0, next_fire_at=INSTANT)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")


def test_a_page_resuming_inside_a_tie_is_an_index_range_scan_reading_its_page(tie: None) -> None:
    first = load_horizon([0], until=INSTANT, page=1000, after={0: T0})
    assert len(first.entries) == 1000
    resume = first.resume[0]
    assert resume[0] == INSTANT
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + HORIZON_SQL,
            [[0], [resume[0]], [resume[1]], INSTANT, 1000],
        )
        (plan,) = cursor.fetchone()[0]
    scans = [n for n in plan_nodes(plan["Plan"]) if n.get("Relation Name") == "jobs_job"]
    assert [n["Index Name"] for n in scans] == ["job_due_keyset"], scans
    (scan,) = scans
    assert "ROW(next_fire_at, id) >" in scan["Index Cond"], scan
    # The page's rows only: none of the tie before the resumed row is read and thrown away.
    assert scan["Actual Rows"] == 1000
    assert scan.get("Rows Removed by Filter", 0) == 0, scan


def test_the_pages_of_a_tie_hold_every_job_once(tie: None) -> None:
    seen: list[Any] = []
    resume: dict[int, Any] = {}
    while True:
        page = load_horizon([0], until=INSTANT, page=3000, after={0: T0}, resume=resume)
        seen.extend(e.job_id for e in page.entries)
        if 0 not in page.resume:
            assert page.loaded_until[0] == INSTANT
            break
        assert page.loaded_until[0] < INSTANT
        resume = page.resume
    assert len(seen) == len(set(seen)) == TIE
