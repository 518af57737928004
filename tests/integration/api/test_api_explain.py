"""GET /v1/jobs/{id}/explain: the verdict for an instant, and 400 on a bad one."""

from __future__ import annotations

import pytest

from tests.support.api import ApiClient, error_fields, job_body

pytestmark = pytest.mark.django_db


def _job(alice: ApiClient) -> str:
    job_id: str = alice.post("/v1/jobs", job_body()).json()["job_id"]
    return job_id


def test_an_instant_the_schedule_skips_is_never_due_with_the_nearest_firings(
    alice: ApiClient,
) -> None:
    job_id = _job(alice)  # 09:00 Europe/Paris daily
    response = alice.get(f"/v1/jobs/{job_id}/explain", at="2026-01-02T08:30:00Z")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["verdict"] == "never_due"
    assert body["is_firing"] is False
    assert body["previous_firing"] == "2026-01-02T08:00:00Z"
    assert body["next_firing"] == "2026-01-03T08:00:00Z"
    assert "2026-01-02T09:00:00+01:00" in body["reason"]
    assert body["run_id"] is None


def test_a_due_firing_no_engine_claimed_is_engine_late(alice: ApiClient) -> None:
    job_id = _job(alice)
    body = alice.get(f"/v1/jobs/{job_id}/explain", at="2026-01-02T09:00:00+01:00").json()
    assert body["verdict"] == "engine_late"
    assert body["is_firing"] is True
    assert body["evidence"]["behind_s"] > 0


@pytest.mark.parametrize(
    "at",
    [
        "yesterday",
        "2026-01-02T08:00:00",
        "",
        "2026-13-01T00:00:00Z",
        # Outside the evaluated range: the evaluator's arithmetic would overflow.
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
        "1969-12-31T23:59:59Z",
    ],
)
def test_a_bad_instant_is_400_naming_the_field(alice: ApiClient, at: str) -> None:
    job_id = _job(alice)
    response = alice.get(f"/v1/jobs/{job_id}/explain", at=at)
    assert response.status_code == 400, response.content
    assert "at" in error_fields(response)


def test_a_missing_instant_is_400(alice: ApiClient) -> None:
    response = alice.get(f"/v1/jobs/{_job(alice)}/explain")
    assert response.status_code == 400
    assert "at" in error_fields(response)


def test_the_endpoint_is_in_the_openapi_schema(alice: ApiClient) -> None:
    schema = alice.get("/v1/openapi.json").json()
    operation = schema["paths"]["/v1/jobs/{job_id}/explain"]["get"]
    assert operation["operationId"] == "jobs_explain"
    assert any(p["name"] == "at" for p in operation["parameters"])
