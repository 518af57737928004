"""Run history, run detail and cancel, dead letters and replay, schedule preview."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import DeadLetter, Job, JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support.api import ApiClient, error_fields, job_body
from tests.support.factories import T0, dead_run_factory, run_factory, running_run_factory

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice: ApiClient) -> Job:
    return Job.objects.get(id=alice.post("/v1/jobs", job_body()).json()["job_id"])


def _dead_run(job: Job) -> JobRun:
    run = dead_run_factory(job, scheduled_for=T0 - timedelta(hours=1), last_error="boom")
    DeadLetter.objects.create(
        run=run, job=job, tenant=job.tenant, attempts=3, last_error="boom", moved_at=T0
    )
    return run


def test_runs_are_newest_first_with_keyset_pages(alice: ApiClient, job: Job) -> None:
    for day in range(5):
        run_factory(job, scheduled_for=T0 + timedelta(days=day))

    first = alice.get(f"/v1/jobs/{job.id}/runs", limit="2").json()
    second = alice.client.get(first["next"], headers=alice._headers(None)).json()
    third = alice.client.get(second["next"], headers=alice._headers(None)).json()

    days = [
        r["scheduled_for"][:10] for r in first["results"] + second["results"] + third["results"]
    ]
    assert days == ["2026-01-05", "2026-01-04", "2026-01-03", "2026-01-02", "2026-01-01"]
    assert third["next"] is None


def test_runs_filter_by_state_and_time_range(alice: ApiClient, job: Job) -> None:
    for day in range(4):
        run_factory(job, scheduled_for=T0 + timedelta(days=day))
    run_factory(
        job,
        scheduled_for=T0 + timedelta(days=9),
        state=RunState.SUCCEEDED,
        attempt=1,
        finished_at=T0,
        due_at=None,
    )

    done = alice.get(f"/v1/jobs/{job.id}/runs", state="succeeded").json()["results"]
    window = alice.get(
        f"/v1/jobs/{job.id}/runs", since="2026-01-02T00:00:00Z", until="2026-01-04T00:00:00+00:00"
    ).json()["results"]

    assert [r["state"] for r in done] == ["succeeded"]
    assert [r["scheduled_for"] for r in window] == ["2026-01-03T00:00:00Z", "2026-01-02T00:00:00Z"]


def test_run_detail_lists_every_attempt(alice: ApiClient, job: Job) -> None:
    run = _dead_run(job)
    for n in (1, 2):
        RunAttempt.objects.create(run=run, attempt=n, outcome=AttemptOutcome.FAILED, error=f"e{n}")

    body = alice.get(f"/v1/runs/{run.id}").json()

    assert body["run_id"] == str(run.id)
    assert [(a["attempt"], a["error"]) for a in body["attempts"]] == [(1, "e1"), (2, "e2")]


def test_cancel_waiting_run_is_200_running_run_is_202(alice: ApiClient, job: Job) -> None:
    waiting = run_factory(job, scheduled_for=T0)
    running = running_run_factory(job, scheduled_for=T0 - timedelta(days=1))

    first = alice.post(f"/v1/runs/{waiting.id}/cancel")
    second = alice.post(f"/v1/runs/{running.id}/cancel")
    again = alice.post(f"/v1/runs/{waiting.id}/cancel")

    assert (first.status_code, first.json()["state"]) == (200, "cancelled")
    assert (second.status_code, second.json()["cancel_requested"]) == (202, True)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_transition"


def test_dead_letters_list_and_replay(alice: ApiClient, job: Job) -> None:
    run = _dead_run(job)
    letter = DeadLetter.objects.get(run=run)

    listed = alice.get("/v1/dead-letters").json()["results"]
    replayed = alice.post(f"/v1/dead-letters/{letter.id}/replay")
    twice = alice.post(f"/v1/dead-letters/{letter.id}/replay")
    pending = alice.get("/v1/dead-letters", replayed="false").json()["results"]

    assert [d["dead_letter_id"] for d in listed] == [letter.id]
    assert replayed.status_code == 200, replayed.json()
    assert replayed.json()["run"]["state"] == "pending"
    assert replayed.json()["dead_letter"]["replay_count"] == 1
    assert twice.status_code == 409
    assert pending == []


def test_schedule_preview_in_the_given_timezone(alice: ApiClient) -> None:
    response = alice.get(
        "/v1/schedules/preview",
        schedule="0 9 * * *",
        timezone="Europe/Paris",
        count="2",
        after="2026-03-28T00:00:00Z",
    )

    assert response.status_code == 200, response.json()
    # Across the spring-forward change on 2026-03-29: 09:00 stays 09:00 local.
    assert response.json()["fires"] == ["2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z"]
    assert response.json()["fires_local"][1] == "2026-03-29T09:00:00+02:00"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"schedule": "0 0 30 2 *"}, "schedule"),
        ({"schedule": "bogus"}, "schedule"),
        ({"schedule": "* * * * *", "timezone": "PST"}, "timezone"),
        ({"schedule": "* * * * *", "count": "0"}, "count"),
        ({"schedule": "* * * * *", "after": "2026-01-01T00:00:00"}, "after"),
        ({}, "schedule"),
    ],
)
def test_schedule_preview_rejects_bad_input(
    alice: ApiClient, query: dict[str, str], field: str
) -> None:
    response = alice.client.get("/v1/schedules/preview", query, headers=alice._headers(None))

    assert response.status_code == 400
    assert field in error_fields(response)
