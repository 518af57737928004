"""A job's runs are read window by window (jobs/run_windows.py): every run comes out once, in
order, forwards and backwards, wherever its firing falls (day partitions, the default
partition, a window's edge inside one millisecond), and a first page plans only its days."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from jobs.models import Job
from jobs.run_partitions import RUN_TABLE, partition_name
from jobs.services.history_partitions import partitions_ensure
from tests.support.api import ApiClient, job_body
from tests.support.clock import FakeClock
from tests.support.factories import T0, run_factory
from tests.support.partition_reads import partitions_touched

pytestmark = pytest.mark.django_db

# Half a millisecond past T0: the first window's edge, a day back, then shares its millisecond
# with firings on both sides of it.
NOW = T0 + timedelta(microseconds=500)
EDGE = NOW - timedelta(days=1)
FIRINGS = [
    NOW + timedelta(days=400),  # past the partitions ahead: the default partition
    NOW + timedelta(days=2),
    NOW + timedelta(milliseconds=1),
    NOW,
    EDGE + timedelta(microseconds=100),  # in the first window, EDGE's millisecond
    EDGE,
    EDGE - timedelta(microseconds=200),  # in the second window, EDGE's millisecond
    EDGE - timedelta(milliseconds=1),
    NOW - timedelta(days=5),
    NOW - timedelta(days=8),
    NOW - timedelta(days=30),
    NOW - timedelta(days=64, microseconds=1),
    NOW - timedelta(days=400),
    datetime(1965, 6, 1, tzinfo=UTC),  # before 1970: id prefix 0
]


@pytest.fixture
def job(alice: ApiClient, clock: FakeClock) -> Job:
    clock.advance(NOW - T0)
    job = Job.objects.get(id=alice.post("/v1/jobs", job_body()).json()["job_id"])
    # Some of the firings in day partitions, the others in the default one.
    partitions_ensure([(NOW + timedelta(days=n)).date() for n in range(-9, 3)])
    for at in FIRINGS:
        run_factory(job, scheduled_for=at)
    return job


def _follow(alice: ApiClient, first: dict[str, Any], link: str) -> list[dict[str, Any]]:
    pages = [first]
    while pages[-1][link]:
        pages.append(alice.client.get(pages[-1][link], headers=alice._headers(None)).json())
    return pages


def _instants(pages: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(r["scheduled_for"]) for p in pages for r in p["results"]]


@pytest.mark.parametrize("limit", [1, 2, 3, 20])
def test_every_run_comes_once_in_order_forwards_and_backwards(
    alice: ApiClient, job: Job, limit: int
) -> None:
    first = alice.get(f"/v1/jobs/{job.id}/runs", limit=str(limit)).json()
    forwards = _follow(alice, first, "next")
    last = forwards[-1]
    backwards = _follow(alice, last, "previous")

    assert _instants(forwards) == sorted(FIRINGS, reverse=True)
    # Backwards from the last page: the pages before it, each still newest first.
    assert (
        _instants(list(reversed(backwards[1:])))
        == sorted(FIRINGS, reverse=True)[: len(FIRINGS) - len(last["results"])]
    )


def test_a_range_comes_whole_whatever_windows_it_crosses(alice: ApiClient, job: Job) -> None:
    since, until = NOW - timedelta(days=64, microseconds=1), EDGE + timedelta(microseconds=100)

    first = alice.get(
        f"/v1/jobs/{job.id}/runs", limit="2", since=since.isoformat(), until=until.isoformat()
    ).json()

    assert _instants(_follow(alice, first, "next")) == sorted(
        (at for at in FIRINGS if since <= at < until), reverse=True
    )


def test_a_first_page_reads_only_the_partitions_of_its_first_window(
    alice: ApiClient, clock: FakeClock
) -> None:
    day = date(2031, 3, 10)
    clock.advance(datetime(2031, 3, 10, 12, tzinfo=UTC) - T0)
    now = clock.now()
    job = Job.objects.get(id=alice.post("/v1/jobs", job_body()).json()["job_id"])
    days = [day + timedelta(days=n) for n in range(-6, 3)]
    partitions_ensure(days)
    for hours in range(0, 6 * 24, 4):
        run_factory(job, scheduled_for=now - timedelta(hours=hours))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {RUN_TABLE}")

    pages: list[Any] = []
    touched = partitions_touched(
        lambda: pages.append(alice.get(f"/v1/jobs/{job.id}/runs", limit="3").json())
    )
    (page,) = pages

    assert len(page["results"]) == 3
    assert partition_name(RUN_TABLE, day) in touched
    # The days before the window's reach (a day back) are never planned, let alone read.
    assert not touched & {partition_name(RUN_TABLE, d) for d in days if d < day - timedelta(days=1)}


def test_the_job_summary_reads_its_newest_runs_through_every_window(
    alice: ApiClient, job: Job
) -> None:
    body = alice.get(f"/v1/jobs/{job.id}").json()

    assert datetime.fromisoformat(body["last_run"]["scheduled_for"]) == max(FIRINGS)
    assert body["figures"]["runs"] == len(FIRINGS)
    assert body["run_counts"] == {"pending": len(FIRINGS)}
