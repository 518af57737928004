"""depends_on and trigger_rule through create, PATCH and bulk; cascade cancel; DAG run fields."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from jobs.models import Job, JobDependency, JobKind, JobRun, JobStatus, RunTrigger
from jobs.states import RunState
from tests.support.api import ApiClient, api_client_for, error_fields, job_body
from tests.support.factories import T0, run_factory

pytestmark = pytest.mark.django_db


def _create(client: ApiClient, **overrides: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs", job_body(**overrides))
    assert response.status_code == 201, response.content
    body: dict[str, Any] = response.json()
    return body


def _dependent(client: ApiClient, name: str, parents: list[str], **more: Any) -> dict[str, Any]:
    body = job_body(name=name, depends_on=parents, **more)
    del body["schedule"]
    response = client.post("/v1/jobs", body)
    assert response.status_code == 201, response.content
    out: dict[str, Any] = response.json()
    return out


def _parents(job_id: str) -> set[str]:
    edges = JobDependency.objects.filter(child_id=job_id)
    return {str(parent) for parent in edges.values_list("parent_id", flat=True)}


def _snapshot() -> tuple[list[dict[str, Any]], list[tuple[Any, Any]]]:
    jobs = list(Job.objects.order_by("id").values("id", "version", "kind", "status"))
    edges = list(JobDependency.objects.order_by("id").values_list("parent_id", "child_id"))
    return jobs, edges


def test_create_with_parents_makes_a_dependent_job(alice: ApiClient) -> None:
    root = _create(alice, name="load-ledger")

    child = _dependent(alice, "balances", [root["job_id"]], trigger_rule="all_done")

    assert child["kind"] == JobKind.DEPENDENT
    assert child["depends_on"] == [root["job_id"]]
    assert child["trigger_rule"] == "all_done"
    assert child["next_fire_at"] is None
    assert child["schedule"] == ""
    assert _parents(child["job_id"]) == {root["job_id"]}
    assert alice.get(f"/v1/jobs/{child['job_id']}").json()["depends_on"] == [root["job_id"]]
    listed = alice.get("/v1/jobs", name="balances").json()["results"]
    assert listed[0]["depends_on"] == [root["job_id"]]
    assert _create(alice, name="plain")["depends_on"] == []


@pytest.mark.parametrize(
    ("depends_on", "message"),
    [
        ([str(uuid.uuid4())], "no job"),
        ([123], "must be a string"),
        (["not-a-uuid"], "valid UUID"),
        ("6c1d0000-0000-0000-0000-000000000000", "list"),
    ],
)
def test_bad_parents_are_400_on_depends_on(alice: ApiClient, depends_on: Any, message: str) -> None:
    before = _snapshot()
    body = job_body(name="child", depends_on=depends_on)
    del body["schedule"]

    response = alice.post("/v1/jobs", body)

    assert response.status_code == 400, response.content
    fields = error_fields(response)
    assert any(name.startswith("depends_on") for name in fields), fields
    assert message in " ".join(m for msgs in fields.values() for m in msgs)
    assert _snapshot() == before


def test_a_parent_of_another_tenant_reads_as_missing(alice: ApiClient) -> None:
    mallory = api_client_for("mallory")
    foreign = _create(mallory, name="theirs")
    body = job_body(name="child", depends_on=[foreign["job_id"]])
    del body["schedule"]

    response = alice.post("/v1/jobs", body)

    assert response.status_code == 400
    assert "no job" in error_fields(response)["depends_on"][0]
    assert not JobDependency.objects.exists()


def test_a_schedule_with_parents_is_refused_naming_the_schedule(alice: ApiClient) -> None:
    root = _create(alice, name="root")

    response = alice.post("/v1/jobs", job_body(name="child", depends_on=[root["job_id"]]))

    assert response.status_code == 400
    assert "depends_on" in error_fields(response)["schedule"][0]


def test_trigger_rule_outside_the_choices_is_400(alice: ApiClient) -> None:
    response = alice.post("/v1/jobs", job_body(trigger_rule="any_success"))
    assert response.status_code == 400
    assert "trigger_rule" in error_fields(response)


def test_patch_replaces_parents_and_refuses_a_cycle_naming_it(alice: ApiClient) -> None:
    root = _create(alice, name="ledger")
    a = _dependent(alice, "balances", [root["job_id"]])
    b = _dependent(alice, "statements", [a["job_id"]])
    other = _create(alice, name="fx-rates")

    moved = alice.patch(f"/v1/jobs/{b['job_id']}", {"depends_on": [a["job_id"], root["job_id"]]})
    assert moved.status_code == 200, moved.content
    assert sorted(moved.json()["depends_on"]) == sorted([a["job_id"], root["job_id"]])

    before = _snapshot()
    cycle = alice.patch(f"/v1/jobs/{a['job_id']}", {"depends_on": [b["job_id"]]})
    assert cycle.status_code == 400
    message = error_fields(cycle)["depends_on"][0]
    assert "cycle" in message
    assert "statements" in message
    assert "balances" in message
    assert _snapshot() == before

    # A root on another schedule would never share a logical time with this DAG's root.
    other_schedule = alice.patch(f"/v1/jobs/{other['job_id']}", {"schedule": "0 3 * * *"})
    assert other_schedule.status_code == 200
    mixed = alice.patch(f"/v1/jobs/{b['job_id']}", {"depends_on": [a["job_id"], other["job_id"]]})
    assert mixed.status_code == 400
    assert "same schedule" in error_fields(mixed)["depends_on"][0]


def test_patch_switches_between_a_schedule_and_parents(alice: ApiClient) -> None:
    root = _create(alice, name="root")
    job = _create(alice, name="was-cron")

    dependent = alice.patch(f"/v1/jobs/{job['job_id']}", {"depends_on": [root["job_id"]]})
    assert dependent.status_code == 200, dependent.content
    assert dependent.json()["kind"] == JobKind.DEPENDENT
    assert dependent.json()["next_fire_at"] is None

    back = alice.patch(f"/v1/jobs/{job['job_id']}", {"schedule": "0 9 * * *"})
    assert back.status_code == 200, back.content
    assert back.json()["kind"] == "cron"
    assert back.json()["depends_on"] == []
    assert back.json()["next_fire_at"] is not None
    assert not JobDependency.objects.filter(child_id=job["job_id"]).exists()

    both = alice.patch(
        f"/v1/jobs/{job['job_id']}", {"schedule": "0 9 * * *", "depends_on": [root["job_id"]]}
    )
    assert both.status_code == 400
    assert "schedule" in error_fields(both)


def test_bulk_create_with_parents_names_the_bad_item(alice: ApiClient) -> None:
    root = _create(alice, name="root")
    good = {"name": "child-0", "depends_on": [root["job_id"]],
            "target": {"kind": "callable", "name": "demo.heartbeat"}}  # fmt: skip
    bad = {**good, "name": "child-1", "depends_on": [str(uuid.uuid4())]}
    before = _snapshot()

    refused = alice.post("/v1/jobs/bulk", {"jobs": [good, bad]})

    assert refused.status_code == 400, refused.content
    assert "jobs[1].depends_on" in error_fields(refused)
    assert _snapshot() == before

    created = alice.post("/v1/jobs/bulk", {"jobs": [good, {**good, "name": "child-1"}]})
    assert created.status_code == 201, created.content
    assert [job["depends_on"] for job in created.json()] == [[root["job_id"]]] * 2
    assert JobDependency.objects.filter(parent_id=root["job_id"]).count() == 2


def test_cancel_with_live_dependents_is_409_naming_them_and_cascade_cancels_all(
    alice: ApiClient,
) -> None:
    root = _create(alice, name="ledger")
    a = _dependent(alice, "balances", [root["job_id"]])
    b = _dependent(alice, "statements", [a["job_id"]])
    before = _snapshot()

    refused = alice.delete(f"/v1/jobs/{root['job_id']}")

    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "has_dependents"
    assert error["dependents"] == [{"job_id": a["job_id"], "name": "balances"}]
    assert "balances" in error["message"]
    assert _snapshot() == before

    bad = alice.delete(f"/v1/jobs/{root['job_id']}?cascade=yes")
    assert bad.status_code == 400
    assert "cascade" in error_fields(bad)

    done = alice.delete(f"/v1/jobs/{root['job_id']}?cascade=true")
    assert done.status_code == 200, done.content
    statuses = dict(Job.objects.values_list("name", "status"))
    assert statuses == dict.fromkeys(("ledger", "balances", "statements"), JobStatus.CANCELLED)
    assert alice.get(f"/v1/jobs/{b['job_id']}").json()["status"] == JobStatus.CANCELLED


def test_runs_carry_logical_time_and_upstream_run_ids(alice: ApiClient) -> None:
    root = _create(alice, name="root")
    child = _dependent(alice, "child", [root["job_id"]])
    root_job = Job.objects.get(id=root["job_id"])
    parent_run = run_factory(root_job, scheduled_for=T0, state=RunState.SUCCEEDED, attempt=1,
                             finished_at=T0, due_at=None)  # fmt: skip
    child_run = JobRun.objects.get(job_id=child["job_id"])

    page = alice.get(f"/v1/jobs/{child['job_id']}/runs").json()["results"]
    detail = alice.get(f"/v1/runs/{child_run.id}").json()

    for body in (page[0], detail):
        assert body["logical_time"] == "2026-01-01T00:00:00Z"
        assert body["logical_time"] == body["scheduled_for"]
        assert body["upstream_run_ids"] == [str(parent_run.id)]
        assert body["trigger"] == RunTrigger.UPSTREAM
    root_runs = alice.get(f"/v1/jobs/{root['job_id']}/runs").json()["results"]
    assert root_runs[0]["upstream_run_ids"] == []


def test_a_bulk_response_reads_every_jobs_parents_in_one_query(alice: ApiClient) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    items = [job_body(name=f"bulk-{i}") for i in range(30)]

    with CaptureQueriesContext(connection) as queries:
        response = alice.post("/v1/jobs/bulk", {"jobs": items})

    assert response.status_code == 201, response.content
    assert all(job["depends_on"] == [] for job in response.json())
    edge_reads = [q["sql"] for q in queries.captured_queries if "jobs_jobdependency" in q["sql"]]
    assert len(edge_reads) == 1, edge_reads
