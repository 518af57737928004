"""The job admin page shows a job's parents and children as links, and its DAG drawn as SVG."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from jobs.models import Job
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client() -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw-unused-123")
    client = Client()
    client.force_login(user)
    return client


def _page(client: Client, job: Job) -> str:
    response = client.get(reverse("admin:jobs_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_job_page_links_parents_and_children_and_draws_the_dag(superuser_client: Client) -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="load-ledger", cron="0 2 * * *")
    middle = job_factory(tenant, name="balances<&>", depends_on=[root.id], cron=None)
    leaf = job_factory(tenant, name="statements", depends_on=[middle.id], cron=None)
    run_factory(root, scheduled_for=T0, state=RunState.SUCCEEDED, attempt=1, finished_at=T0,
                due_at=None)  # fmt: skip

    page = _page(superuser_client, middle)

    parent_url = reverse("admin:jobs_job_change", args=[root.pk])
    child_url = reverse("admin:jobs_job_change", args=[leaf.pk])
    assert f"<a href='{parent_url}'>load-ledger</a>" in page
    assert f"<a href='{child_url}'>statements</a>" in page
    start = page.index('<svg xmlns="http://www.w3.org/2000/svg" class="dag"')
    svg = page[start : page.index("</svg>", start)]
    assert 'data-state="succeeded"' in svg
    assert f'href="{parent_url}"' in svg
    # The name is escaped in the links and in the drawing alike.
    assert "balances&lt;&amp;&gt;" in svg
    assert "balances<&>" not in page


def test_a_job_without_edges_shows_no_drawing(superuser_client: Client) -> None:
    job = job_factory(name="alone")

    page = _page(superuser_client, job)

    assert "dependencies" in page
    assert 'class="dag"' not in page
