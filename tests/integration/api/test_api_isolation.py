"""Tenant isolation: a second tenant gets 404 on every endpoint for the first tenant's ids."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobs.models import DeadLetter, Job, JobRun
from tests.support.api import (
    ApiClient,
    api_client_for,
    job_body,
)
from tests.support.factories import T0, dead_run_factory, run_factory

pytestmark = pytest.mark.django_db


Call = Callable[[ApiClient, dict[str, Any]], Any]

FOREIGN_CALLS: dict[str, Call] = {
    "get job": lambda c, ids: c.get(f"/v1/jobs/{ids['job']}"),
    "patch job": lambda c, ids: c.patch(f"/v1/jobs/{ids['job']}", {"status": "paused"}),
    "delete job": lambda c, ids: c.delete(f"/v1/jobs/{ids['job']}"),
    "trigger job": lambda c, ids: c.post(f"/v1/jobs/{ids['job']}/trigger"),
    "list runs": lambda c, ids: c.get(f"/v1/jobs/{ids['job']}/runs"),
    "job graph": lambda c, ids: c.get(f"/v1/jobs/{ids['job']}/graph"),
    "explain job": lambda c, ids: c.get(f"/v1/jobs/{ids['job']}/explain", at="2026-01-02T08:00Z"),
    "get run": lambda c, ids: c.get(f"/v1/runs/{ids['run']}"),
    "cancel run": lambda c, ids: c.post(f"/v1/runs/{ids['run']}/cancel"),
    "replay dead letter": lambda c, ids: c.post(f"/v1/dead-letters/{ids['dead_letter']}/replay"),
}


@pytest.fixture
def owned() -> dict[str, Any]:
    alice = api_client_for("alice")
    job = Job.objects.get(id=alice.post("/v1/jobs", job_body()).json()["job_id"])
    run = run_factory(job, scheduled_for=T0)
    dead = dead_run_factory(job, scheduled_for=T0 - timedelta(days=1))
    letter = DeadLetter.objects.create(
        run=dead, job=job, tenant=job.tenant, attempts=3, moved_at=T0
    )
    return {"client": alice, "job": job.id, "run": run.id, "dead_letter": letter.id}


@pytest.mark.parametrize("call", FOREIGN_CALLS.values(), ids=FOREIGN_CALLS.keys())
def test_other_tenant_gets_404_and_changes_nothing(owned: dict[str, Any], call: Call) -> None:
    mallory = api_client_for("mallory")
    before = Job.objects.values().get(id=owned["job"])
    runs_before = list(JobRun.objects.order_by("id").values())

    response = call(mallory, owned)

    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"
    assert Job.objects.values().get(id=owned["job"]) == before
    assert list(JobRun.objects.order_by("id").values()) == runs_before


def test_lists_show_only_own_objects(owned: dict[str, Any]) -> None:
    mallory = api_client_for("mallory")

    assert mallory.get("/v1/jobs").json()["results"] == []
    assert mallory.get("/v1/jobs", name="nightly-report").json()["results"] == []
    assert mallory.get("/v1/dead-letters").json()["results"] == []
    assert mallory.get("/v1/dead-letters", job_id=str(owned["job"])).json()["results"] == []
    assert len(owned["client"].get("/v1/dead-letters").json()["results"]) == 1
