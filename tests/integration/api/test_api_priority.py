"""The priority scale: 0 (highest) to 9 (lowest), refused outside it, described in the schema."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job
from tests.support.api import ApiClient, error_fields, job_body

pytestmark = pytest.mark.django_db

SCALE = "0 (highest) and 9 (lowest)"


@pytest.mark.parametrize("priority", [-1, 10, 2**31])
def test_a_priority_outside_the_scale_is_a_400_naming_the_scale(
    alice: ApiClient, priority: int
) -> None:
    response = alice.post("/v1/jobs", job_body(priority=priority))

    assert response.status_code == 400, response.json()
    assert any(SCALE in message for message in error_fields(response)["priority"])
    assert Job.objects.count() == 0


def test_a_patch_outside_the_scale_is_a_400_and_changes_nothing(alice: ApiClient) -> None:
    created = alice.post("/v1/jobs", job_body(priority=0)).json()

    response = alice.patch(f"/v1/jobs/{created['job_id']}", {"priority": 10})

    assert response.status_code == 400, response.json()
    assert any(SCALE in message for message in error_fields(response)["priority"])
    job = Job.objects.get(id=created["job_id"])
    assert (job.priority, job.version) == (0, created["version"])


@pytest.mark.parametrize("priority", [0, 9])
def test_both_ends_of_the_scale_are_accepted(alice: ApiClient, priority: int) -> None:
    response = alice.post("/v1/jobs", job_body(priority=priority))

    assert response.status_code == 201, response.json()
    assert response.json()["priority"] == priority


def test_the_schema_says_which_end_is_highest(alice: ApiClient) -> None:
    schemas: dict[str, Any] = alice.get("/v1/openapi.json").json()["components"]["schemas"]
    described = {
        name: schema["properties"]["priority"].get("description", "")
        for name, schema in schemas.items()
        if "priority" in schema.get("properties", {})
    }
    # The request bodies (create, bulk item, patch) and the job as returned.
    assert len(described) >= 3, described
    for name, description in described.items():
        assert "0 (highest) to 9 (lowest)" in description, name
        assert "lowest priority waiting" in description, name
