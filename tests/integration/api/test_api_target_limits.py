"""/v1/target-limits and a job's ``rate_limit``: created, read, changed, deleted; bad values
are 400s naming the field, with nothing written; another tenant's rows are unknown (404)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, TargetLimit
from tests.support.api import ApiClient, api_client_for, error_fields, job_body

pytestmark = pytest.mark.django_db


def test_create_list_change_and_delete_a_tenants_target_limit(alice: ApiClient) -> None:
    created = alice.post(
        "/v1/target-limits", {"target": "API.Example.com", "rate_per_s": 5, "burst": 10}
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["target"], body["rate_per_s"], body["burst"]) == ("api.example.com", 5.0, 10)
    assert created["Location"] == f"/v1/target-limits/{body['target_limit_id']}"
    every = alice.post("/v1/target-limits", {"target": "*", "rate_per_s": 0.5})
    assert every.status_code == 201, every.content
    assert every.json()["burst"] == 1
    listed = alice.get("/v1/target-limits").json()["results"]
    assert [row["target"] for row in listed] == ["*", "api.example.com"]

    item = f"/v1/target-limits/{body['target_limit_id']}"
    changed = alice.patch(item, {"rate_per_s": 2.5})
    assert changed.status_code == 200, changed.content
    assert (changed.json()["rate_per_s"], changed.json()["burst"]) == (2.5, 10)
    assert alice.delete(item).status_code == 204
    assert alice.get(item).status_code == 404
    assert list(TargetLimit.objects.values_list("target", flat=True)) == ["*"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target": "api.test", "rate_per_s": 0}, "rate_per_s"),
        ({"target": "api.test", "rate_per_s": -1}, "rate_per_s"),
        ({"target": "api.test", "rate_per_s": "5"}, "rate_per_s"),
        ({"target": "api.test", "rate_per_s": 1e9}, "rate_per_s"),
        ({"target": "api.test", "rate_per_s": 1, "burst": 0}, "burst"),
        ({"target": "api.test", "rate_per_s": 1, "burst": 1.5}, "burst"),
        ({"target": "", "rate_per_s": 1}, "target"),
        ({"target": "two words", "rate_per_s": 1}, "target"),
        ({"target": "*.example.com", "rate_per_s": 1}, "target"),
        ({"target": "api.test"}, "rate_per_s"),
        ({"target": "api.test", "rate_per_s": 1, "color": "red"}, "color"),
    ],
)
def test_bad_target_limits_are_field_errors_and_write_nothing(
    alice: ApiClient, body: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/target-limits", body)
    assert response.status_code == 400, response.content
    assert field in error_fields(response)
    assert not TargetLimit.objects.exists()


def test_a_second_limit_for_one_target_is_refused(alice: ApiClient) -> None:
    assert alice.post("/v1/target-limits", {"target": "a.test", "rate_per_s": 1}).status_code == 201
    again = alice.post("/v1/target-limits", {"target": "A.test", "rate_per_s": 2})
    assert again.status_code == 400
    assert "target" in error_fields(again)
    assert TargetLimit.objects.get().rate_per_s == 1


def test_another_tenants_limits_are_unknown(alice: ApiClient) -> None:
    row = alice.post("/v1/target-limits", {"target": "a.test", "rate_per_s": 1}).json()
    bob = api_client_for("bob")
    assert bob.get("/v1/target-limits").json()["results"] == []
    item = f"/v1/target-limits/{row['target_limit_id']}"
    assert bob.get(item).status_code == 404
    assert bob.patch(item, {"rate_per_s": 9}).status_code == 404
    assert bob.delete(item).status_code == 404
    assert TargetLimit.objects.get().rate_per_s == 1


def test_a_jobs_rate_limit_is_set_shown_and_patched(alice: ApiClient) -> None:
    created = alice.post("/v1/jobs", job_body(rate_limit={"group": "Payments"}))
    assert created.status_code == 201, created.content
    assert created.json()["rate_limit"] == {"group": "payments", "rate_per_s": None, "burst": None}
    job_id = created.json()["job_id"]
    patched = alice.patch(f"/v1/jobs/{job_id}", {"rate_limit": {"rate_per_s": 2, "burst": 4}})
    assert patched.status_code == 200, patched.content
    assert patched.json()["rate_limit"] == {"group": "payments", "rate_per_s": 2.0, "burst": 4}
    job = Job.objects.get(id=job_id)
    assert (job.target_group, job.target_rate, job.target_burst) == ("payments", 2.0, 4)


@pytest.mark.parametrize(
    ("rate_limit", "field"),
    [
        ({"rate_per_s": 0}, "rate_limit.rate_per_s"),
        ({"burst": 3}, "rate_limit.burst"),
        ({"rate_per_s": 1, "burst": 0}, "rate_limit.burst"),
        ({"group": "*"}, "rate_limit.group"),
        ({"group": "a b"}, "rate_limit.group"),
        ({"group": 5}, "rate_limit.group"),
        ({"rate": 5}, "rate_limit.rate"),
    ],
)
def test_bad_job_rate_limits_are_field_errors_and_write_nothing(
    alice: ApiClient, rate_limit: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/jobs", job_body(rate_limit=rate_limit))
    assert response.status_code == 400, response.content
    assert field in error_fields(response), error_fields(response)
    assert not Job.objects.exists()


def test_the_openapi_schema_describes_target_limits(alice: ApiClient) -> None:
    schema = alice.get("/v1/openapi.json").json()
    assert {"get", "post"} <= set(schema["paths"]["/v1/target-limits"])
    assert {"get", "patch", "delete"} <= set(schema["paths"]["/v1/target-limits/{target_limit_id}"])
    job = schema["components"]["schemas"]["JobOut"]["properties"]
    assert "rate_limit" in job
