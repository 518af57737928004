"""The runs endpoints serve the hot window; archived days answer with a pointer to the archive,
never with an empty page that reads as "never ran" (docs/api.md, docs/history.md)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest

from jobs.models import ArchivedDay, Job
from jobs.models_archive import ArchiveStep
from jobs.run_ids import run_id_for
from tests.support.api import ApiClient, job_body
from tests.support.factories import T0, run_factory

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice: ApiClient) -> Job:
    return Job.objects.get(id=alice.post("/v1/jobs", job_body()).json()["job_id"])


def _archived(*days: date) -> None:
    for day in days:
        ArchivedDay.objects.create(
            day=day,
            step=ArchiveStep.ARCHIVED,
            run_table="",
            attempt_table="",
            dead_letter_table="",
            directory=f"/archive/runs/{day.isoformat()}",
            manifest_sha256="0" * 64,
            detached_at=T0,
            updated_at=T0,
        )


DEC_1, DEC_2, DEC_3 = date(2025, 12, 1), date(2025, 12, 2), date(2025, 12, 3)


def test_a_range_entirely_archived_is_a_410_with_the_days(alice: ApiClient, job: Job) -> None:
    _archived(DEC_1, DEC_2, DEC_3)

    response = alice.get(
        f"/v1/jobs/{job.id}/runs", since="2025-12-01T00:00:00Z", until="2025-12-03T00:00:00Z"
    )

    assert response.status_code == 410
    error = response.json()["error"]
    assert error["code"] == "archived"
    assert error["archived"]["from"] == "2025-12-01T00:00:00.000000Z"
    assert error["archived"]["until"] == "2025-12-03T00:00:00.000000Z"
    assert error["archived"]["days"] == 2
    assert "restore_runs" in error["archived"]["message"]


def test_the_page_that_ends_the_hot_window_names_the_archived_days(
    alice: ApiClient, job: Job
) -> None:
    _archived(DEC_1, DEC_2)
    run_factory(job, scheduled_for=T0)
    run_factory(job, scheduled_for=T0 + timedelta(hours=1))

    first = alice.get(f"/v1/jobs/{job.id}/runs", limit="1").json()
    last = alice.client.get(first["next"], headers=alice._headers(None)).json()

    # Only the page without a next one says it: earlier pages are all hot.
    assert first["archived"] is None
    assert len(last["results"]) == 1
    assert last["next"] is None
    assert last["archived"]["days"] == 2
    assert last["archived"]["from"] == "2025-12-01T00:00:00.000000Z"


def test_a_range_partly_archived_answers_its_hot_runs_and_the_pointer(
    alice: ApiClient, job: Job
) -> None:
    _archived(DEC_1)
    # Dec 2 was not archived (a day kept hot, e.g. an open dead letter): its runs are served.
    run_factory(job, scheduled_for=datetime(2025, 12, 2, 8, tzinfo=UTC))

    body = alice.get(
        f"/v1/jobs/{job.id}/runs", since="2025-12-01T00:00:00Z", until="2025-12-03T00:00:00Z"
    ).json()

    assert [r["scheduled_for"][:10] for r in body["results"]] == ["2025-12-02"]
    assert body["archived"]["days"] == 1


def test_a_range_with_a_hot_day_but_no_run_is_an_empty_page_with_the_pointer(
    alice: ApiClient, job: Job
) -> None:
    _archived(DEC_1, DEC_3)

    response = alice.get(
        f"/v1/jobs/{job.id}/runs", since="2025-12-01T00:00:00Z", until="2025-12-04T00:00:00Z"
    )

    assert response.status_code == 200
    assert response.json()["results"] == []
    assert response.json()["archived"]["days"] == 2


def test_without_archived_days_nothing_changes(alice: ApiClient, job: Job) -> None:
    body = alice.get(f"/v1/jobs/{job.id}/runs", until="2025-12-03T00:00:00Z").json()
    assert body == {"results": [], "next": None, "previous": None, "archived": None}


def test_a_run_of_an_archived_day_is_a_410_and_an_unknown_one_a_404(alice: ApiClient) -> None:
    _archived(DEC_1)

    archived = alice.get(f"/v1/runs/{run_id_for(datetime(2025, 12, 1, 13, tzinfo=UTC))}")
    hot_day = alice.get(f"/v1/runs/{run_id_for(datetime(2025, 12, 2, 13, tzinfo=UTC))}")
    random = alice.get(f"/v1/runs/{uuid.uuid4()}")

    assert archived.status_code == 410
    assert archived.json()["error"]["archived"]["days"] == 1
    assert archived.json()["error"]["archived"]["from"] == "2025-12-01T00:00:00.000000Z"
    assert hot_day.status_code == 404
    assert random.status_code == 404
