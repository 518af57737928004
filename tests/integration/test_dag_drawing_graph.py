"""dag_svg on stored jobs: the whole DAG when it fits the bound, else the job's lineage."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from jobs.dag_drawing import dag_svg
from jobs.models import Job, JobDependency
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


def _edge(parent: Job, child: Job) -> None:
    JobDependency.objects.create(tenant=parent.tenant, parent=parent, child=child, created_at=T0)


def _drawn(markup: str) -> tuple[set[str], str]:
    root = ET.fromstring(markup)
    names = {
        "".join(g.find(f"{SVG}title").itertext()).split(" \u2014 ")[0]  # type: ignore[union-attr]
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "dag-node"
    }
    return names, "".join(root.itertext())


def test_the_drawing_shows_the_whole_dag_with_states_and_links() -> None:
    tenant = tenant_factory()
    jobs = {n: job_factory(tenant, name=n) for n in ("ledger", "balances", "fees", "statements")}
    for parent, child in [("ledger", "balances"), ("ledger", "fees"), ("balances", "statements"),
                          ("fees", "statements")]:  # fmt: skip
        _edge(jobs[parent], jobs[child])
    run_factory(jobs["fees"], scheduled_for=T0, state=RunState.DEAD, attempt=3, finished_at=T0,
                due_at=None)  # fmt: skip

    markup = dag_svg(jobs["balances"], link=lambda job: f"/jobs/{job.name}")

    names, text = _drawn(markup)
    # fees is neither an ancestor nor a descendant of balances, but it is in its DAG.
    assert names == {"ledger", "balances", "fees", "statements"}
    assert 'data-state="dead"' in markup
    assert 'href="/jobs/fees"' in markup
    assert "too large" not in text
    assert dag_svg(job_factory(tenant, name="alone")) == ""


def test_a_dag_over_the_bound_is_drawn_as_the_jobs_lineage_with_a_note() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="root")
    middle = job_factory(tenant, name="middle")
    _edge(root, middle)
    for i in range(6):
        _edge(root, job_factory(tenant, name=f"sibling-{i}"))

    names, text = _drawn(dag_svg(middle, limit=4))

    assert names == {"root", "middle"}
    assert "ancestors and descendants only" in text

    names, text = _drawn(dag_svg(root, limit=4))
    assert len(names) == 4
    assert "only 4 of this job's ancestors and descendants are shown" in text
