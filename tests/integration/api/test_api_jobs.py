"""POST/GET/PATCH/DELETE /v1/jobs: happy paths, idempotency, ETags and optimistic concurrency."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import Job, JobRun
from jobs.states import RunState
from tests.support.api import ApiClient, api_client_for, error_fields, job_body
from tests.support.factories import T0, run_factory, running_run_factory

pytestmark = pytest.mark.django_db


def test_create_returns_201_with_location_and_next_fire(alice: ApiClient) -> None:
    response = alice.post("/v1/jobs", job_body())

    assert response.status_code == 201, response.json()
    body = response.json()
    assert response["Location"] == f"http://testserver/v1/jobs/{body['job_id']}"
    # 09:00 in Paris on 2026-01-01 (winter, UTC+1) is 08:00 UTC.
    assert body["next_fire_at"] == "2026-01-01T08:00:00Z"
    assert body["status"] == "active"
    assert body["version"] == 1
    assert body["target"] == {
        "kind": "callable",
        "name": "demo.heartbeat",
        "url": "",
        "header_names": [],
    }
    assert response["X-Request-ID"]


def test_create_interval_and_one_off_jobs(alice: ApiClient) -> None:
    interval = alice.post("/v1/jobs", job_body(name="poll", schedule=None, interval_sec=90))
    once = alice.post(
        "/v1/jobs", job_body(name="once", schedule=None, run_at="2026-01-02T10:00:00+02:00")
    )

    assert interval.status_code == 201, interval.json()
    assert interval.json()["next_fire_at"] == "2026-01-01T00:01:30Z"
    assert once.status_code == 201, once.json()
    assert once.json()["next_fire_at"] == "2026-01-02T08:00:00Z"
    assert once.json()["kind"] == "once"


def test_create_with_every_policy_field(alice: ApiClient) -> None:
    body = job_body(
        retries={"max_attempts": 5, "base_delay_sec": 2, "max_delay_sec": 60, "jitter": False},
        timeout_sec=30,
        concurrency_policy="forbid",
        catchup={"policy": "replay_all", "limit": 10, "starting_deadline_sec": 120},
        jitter_sec=5,
        critical=True,
        priority=9,
        queue="payments",
        target={
            "kind": "http",
            "url": "https://93.184.216.34/hook",
            "headers": {"Authorization": "Bearer secret"},
        },
    )
    response = alice.post("/v1/jobs", body)

    assert response.status_code == 201, response.json()
    out = response.json()
    assert out["retries"] == {
        "max_attempts": 5,
        "base_delay_sec": 2,
        "max_delay_sec": 60,
        "jitter": False,
        "retry_on_client_error": False,
    }
    assert out["catchup"] == {"policy": "replay_all", "limit": 10, "starting_deadline_sec": 120}
    assert (out["timeout_sec"], out["jitter_sec"], out["priority"]) == (30, 5, 9)
    # Header values may be credentials: the API echoes names only.
    assert out["target"]["header_names"] == ["Authorization"]
    assert "secret" not in response.content.decode()


def test_same_idempotency_key_returns_the_original_job(alice: ApiClient) -> None:
    first = alice.post("/v1/jobs", job_body(idempotency_key="k-1"))
    again = alice.post("/v1/jobs", job_body(), headers={"Idempotency-Key": "k-1"})

    assert first.status_code == 201
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["job_id"] == first.json()["job_id"]
    assert Job.objects.count() == 1


def test_used_idempotency_key_with_another_body_is_422(alice: ApiClient) -> None:
    alice.post("/v1/jobs", job_body(idempotency_key="k-1"))
    response = alice.post("/v1/jobs", job_body(idempotency_key="k-1", schedule="0 10 * * *"))

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1


def test_idempotency_keys_are_per_tenant(alice: ApiClient) -> None:
    bob = api_client_for("bob")
    a = alice.post("/v1/jobs", job_body(idempotency_key="shared"))
    b = bob.post("/v1/jobs", job_body(idempotency_key="shared"))

    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["job_id"] != b.json()["job_id"]


def test_list_filters_and_pages_with_links(alice: ApiClient) -> None:
    for i in range(5):
        alice.post("/v1/jobs", job_body(name=f"job-{i}"))
    paused_id = alice.post("/v1/jobs", job_body(name="paused")).json()["job_id"]
    alice.patch(f"/v1/jobs/{paused_id}", {"status": "paused"})

    first = alice.get("/v1/jobs", limit="4").json()
    second = alice.client.get(first["next"], headers=alice._headers(None)).json()
    back = alice.client.get(second["previous"], headers=alice._headers(None)).json()
    paused = alice.get("/v1/jobs", status="paused").json()
    named = alice.get("/v1/jobs", name="job-3").json()

    names = [job["name"] for job in first["results"] + second["results"]]
    assert sorted(names) == sorted([f"job-{i}" for i in range(5)] + ["paused"])
    assert first["previous"] is None
    assert second["next"] is None
    assert [j["job_id"] for j in back["results"]] == [j["job_id"] for j in first["results"]]
    assert [job["job_id"] for job in paused["results"]] == [paused_id]
    assert [job["name"] for job in named["results"]] == ["job-3"]


def test_get_shows_last_run_counts_and_etag(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]
    job = Job.objects.get(id=job_id)
    run_factory(job, scheduled_for=T0, state=RunState.SUCCEEDED, attempt=1, finished_at=T0)
    run_factory(job, scheduled_for=T0 + timedelta(days=1))

    response = alice.get(f"/v1/jobs/{job_id}")

    body = response.json()
    assert body["run_counts"] == {"succeeded": 1, "pending": 1}
    assert body["last_run"]["scheduled_for"] == "2026-01-02T00:00:00Z"
    assert response["ETag"].startswith('"1-')
    not_modified = alice.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": response["ETag"]})
    assert not_modified.status_code == 304
    # A new run changes the representation, so the old tag no longer matches.
    run_factory(job, scheduled_for=T0 + timedelta(days=2))
    changed = alice.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": response["ETag"]})
    assert changed.status_code == 200


def test_patch_changes_schedule_and_recomputes_next_fire(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(
        f"/v1/jobs/{job_id}", {"schedule": "30 6 * * *", "timezone": "UTC", "version": 1}
    )

    assert response.status_code == 200, response.json()
    assert response.json()["next_fire_at"] == "2026-01-01T06:30:00Z"
    assert response.json()["version"] == 2
    assert response.json()["payload"] == {"report": "sales"}


def test_patch_switches_schedule_kind(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(f"/v1/jobs/{job_id}", {"interval_sec": 600})

    assert response.status_code == 200, response.json()
    assert response.json()["kind"] == "interval"
    assert response.json()["next_fire_at"] == "2026-01-01T00:10:00Z"


def test_patch_pause_and_resume(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    paused = alice.patch(f"/v1/jobs/{job_id}", {"status": "paused"}, {"If-Match": '"1"'})
    resumed = alice.patch(f"/v1/jobs/{job_id}", {"status": "active"}, {"If-Match": paused["ETag"]})

    assert paused.json()["status"] == "paused"
    assert resumed.status_code == 200, resumed.json()
    assert resumed.json()["status"] == "active"
    assert resumed.json()["version"] == 3


def test_stale_patch_is_409_and_changes_nothing(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]
    alice.patch(f"/v1/jobs/{job_id}", {"payload": {"v": 2}})
    before = Job.objects.get(id=job_id)

    response = alice.patch(
        f"/v1/jobs/{job_id}", {"payload": {"v": 3}, "status": "paused"}, {"If-Match": '"1"'}
    )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "version_conflict"
    assert response.json()["error"]["current_version"] == 2
    after = Job.objects.get(id=job_id)
    assert (after.version, after.payload, after.status) == (2, {"v": 2}, "active")
    assert after.updated_at == before.updated_at


def test_patch_version_field_and_if_match_must_agree(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(f"/v1/jobs/{job_id}", {"version": 1}, {"If-Match": '"2"'})

    assert response.status_code == 400
    assert "version" in error_fields(response)


def test_delete_cancels_job_and_stops_runs(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]
    job = Job.objects.get(id=job_id)
    waiting = run_factory(job, scheduled_for=T0)
    running = running_run_factory(job, scheduled_for=T0 - timedelta(days=1))

    response = alice.delete(f"/v1/jobs/{job_id}")
    again = alice.delete(f"/v1/jobs/{job_id}")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["next_fire_at"] is None
    assert again.status_code == 200
    assert JobRun.objects.get(id=waiting.id).state == RunState.CANCELLED
    assert JobRun.objects.get(id=running.id).cancel_requested is True
    assert alice.patch(f"/v1/jobs/{job_id}", {"status": "active"}).status_code == 409


def test_trigger_creates_a_manual_run(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.post(f"/v1/jobs/{job_id}/trigger")

    assert response.status_code == 201, response.json()
    run = response.json()
    assert run["job_id"] == job_id
    assert run["trigger"] == "manual"
    assert run["state"] == "pending"
    assert run["scheduled_for"] == "2026-01-01T00:00:00Z"
    assert response["Location"].endswith(f"/v1/runs/{run['run_id']}")


def test_bulk_create_inserts_all_or_nothing(alice: ApiClient) -> None:
    good = alice.post("/v1/jobs/bulk", {"jobs": [job_body(name=f"b-{i}") for i in range(3)]})
    bad = alice.post(
        "/v1/jobs/bulk",
        {"jobs": [job_body(name="c-0"), job_body(name="c-1", timezone="Mars/Olympus")]},
    )

    assert good.status_code == 201, good.json()
    assert len(good.json()) == 3
    assert bad.status_code == 400
    assert "jobs[1].timezone" in error_fields(bad)
    assert not Job.objects.filter(name="c-0").exists()


def test_bulk_create_names_the_item_whose_name_is_taken_and_writes_nothing(
    alice: ApiClient,
) -> None:
    assert alice.post("/v1/jobs", job_body(name="taken")).status_code == 201
    response = alice.post(
        "/v1/jobs/bulk", {"jobs": [job_body(name="fresh"), job_body(name="taken")]}
    )

    assert response.status_code == 400
    assert "jobs[1].name" in error_fields(response)
    assert not Job.objects.filter(name="fresh").exists()
    assert Job.objects.filter(name="taken").count() == 1
