"""GET /v1/jobs/{id}/graph: ancestors and descendants with their edges, bounded, per tenant."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, JobDependency
from jobs.selectors_graph import job_graph
from tests.support.api import ApiClient, api_client_for
from tests.support.factories import T0, job_factory, run_factory

pytestmark = pytest.mark.django_db


def _edge(parent: Job, child: Job) -> None:
    # Rows written directly: these tests are about reading the graph, whatever wrote it.
    JobDependency.objects.create(tenant=parent.tenant, parent=parent, child=child, created_at=T0)


def _diamond(client: ApiClient) -> dict[str, Job]:
    """ledger -> balances, fees -> statements; plus audit, a second child of fees."""
    jobs = {name: job_factory(client.tenant, name=name) for name in
            ("ledger", "balances", "fees", "statements", "audit", "unrelated")}  # fmt: skip
    for parent, child in [
        ("ledger", "balances"),
        ("ledger", "fees"),
        ("balances", "statements"),
        ("fees", "statements"),
        ("fees", "audit"),
    ]:
        _edge(jobs[parent], jobs[child])
    return jobs


def _names(body: dict[str, Any]) -> dict[str, str]:
    return {job["name"]: job["relation"] for job in body["jobs"]}


def _edge_names(body: dict[str, Any], jobs: dict[str, Job]) -> set[tuple[str, str]]:
    by_id = {str(job.id): name for name, job in jobs.items()}
    return {(by_id[e["parent_id"]], by_id[e["child_id"]]) for e in body["edges"]}


def test_graph_lists_ancestors_and_descendants_with_their_edges(alice: ApiClient) -> None:
    jobs = _diamond(alice)
    run_factory(jobs["ledger"], scheduled_for=T0, state="succeeded", attempt=1, finished_at=T0)

    response = alice.get(f"/v1/jobs/{jobs['balances'].id}/graph")

    assert response.status_code == 200, response.content
    body = response.json()
    assert _names(body) == {"balances": "self", "ledger": "upstream", "statements": "downstream"}
    assert _edge_names(body, jobs) == {("ledger", "balances"), ("balances", "statements")}
    states = {job["name"]: job["last_run_state"] for job in body["jobs"]}
    # The root's success handed off to balances, which waits as pending; statements has no run.
    assert states == {"balances": "pending", "ledger": "succeeded", "statements": None}
    assert body["truncated"] is False
    assert body["scope"] == "lineage"


def test_scope_dag_adds_the_jobs_connected_through_siblings(alice: ApiClient) -> None:
    jobs = _diamond(alice)

    body = alice.get(f"/v1/jobs/{jobs['balances'].id}/graph", scope="dag").json()

    assert _names(body) == {
        "balances": "self",
        "ledger": "upstream",
        "statements": "downstream",
        "fees": "connected",
        "audit": "connected",
    }
    assert len(body["edges"]) == 5


def test_an_edge_from_an_ancestor_to_a_descendant_is_listed(alice: ApiClient) -> None:
    jobs = _diamond(alice)
    _edge(jobs["ledger"], jobs["statements"])

    body = alice.get(f"/v1/jobs/{jobs['fees'].id}/graph").json()

    assert ("ledger", "statements") in _edge_names(body, jobs)


def test_a_job_without_edges_is_alone(alice: ApiClient) -> None:
    job = job_factory(alice.tenant)

    body = alice.get(f"/v1/jobs/{job.id}/graph").json()

    assert [j["relation"] for j in body["jobs"]] == ["self"]
    assert body["edges"] == []


def test_another_tenants_job_is_404_and_its_graph_never_shows() -> None:
    alice, mallory = api_client_for("alice"), api_client_for("mallory")
    jobs = _diamond(alice)
    own = job_factory(mallory.tenant, name="own")

    assert mallory.get(f"/v1/jobs/{jobs['fees'].id}/graph").status_code == 404
    # An edge row pointing across tenants (which the services never write) is not followed.
    JobDependency.objects.create(tenant=mallory.tenant, parent=own, child=jobs["ledger"],
                                 created_at=T0)  # fmt: skip
    body = alice.get(f"/v1/jobs/{jobs['ledger'].id}/graph").json()
    assert "own" not in _names(body)


@pytest.mark.parametrize(
    ("query", "field"),
    [({"scope": "everything"}, "scope"), ({"depth": "3"}, "depth"), ({"scope": ""}, "scope")],
)
def test_bad_query_is_400_naming_the_parameter(
    alice: ApiClient, query: dict[str, str], field: str
) -> None:
    job = job_factory(alice.tenant)
    response = alice.get(f"/v1/jobs/{job.id}/graph", **query)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_a_large_fan_out_is_cut_at_the_bound_and_says_so(alice: ApiClient) -> None:
    root = job_factory(alice.tenant, name="root")
    children = [job_factory(alice.tenant, name=f"child-{i:02}") for i in range(12)]
    for child in children:
        _edge(root, child)

    graph = job_graph(root, limit=5)
    assert graph.truncated
    assert len(graph.jobs) == 5
    assert graph.jobs[0].id == root.id
    assert len(graph.edges) == 4

    whole = job_graph(root, limit=13)
    assert not whole.truncated
    assert len(whole.jobs) == 13
