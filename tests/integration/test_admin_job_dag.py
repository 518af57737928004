"""Dependencies in the job admin: parents by name, validated by the dependency service."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from jobs.models import Job, JobDependency, JobKind, JobStatus, Tenant
from tests.support.admin import form_data
from tests.support.factories import job_factory, tenant_factory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def tenant() -> Tenant:
    return tenant_factory("acme-corp")


def dependent(tenant: Tenant, parents: str, **overrides: Any) -> dict[str, Any]:
    return form_data(
        tenant.pk, kind="dependent", cron_expression="", depends_on=parents, **overrides
    )


def errors_of(response: Any) -> dict[str, list[str]]:
    return {k: [str(e) for e in v] for k, v in response.context["adminform"].form.errors.items()}


def parents_of(job: Job) -> set[str]:
    return set(JobDependency.objects.filter(child=job).values_list("parent__name", flat=True))


def test_create_a_job_that_runs_after_its_parents(client: Client, tenant: Tenant) -> None:
    job_factory(tenant, name="extract"), job_factory(tenant, name="load")

    response = client.post(ADD, dependent(tenant, "extract\nload", trigger_rule="all_done"))

    assert response.status_code == 302, errors_of(response)
    job = Job.objects.get(name="nightly-report")
    assert (job.kind, job.trigger_rule, job.next_fire_at) == (JobKind.DEPENDENT, "all_done", None)
    assert parents_of(job) == {"extract", "load"}


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"depends_on": "no-such-job"}, "depends_on", "no live job of this tenant"),
        ({"depends_on": ""}, "depends_on", "name at least one parent"),
        ({"depends_on": "extract\nextract"}, "depends_on", "twice"),
        # A schedule with parents: the service refuses the mix on the schedule field.
        ({"kind": "cron", "cron_expression": "0 * * * *"}, "cron_expression", "depends_on"),
    ],
)
def test_bad_parents_are_field_errors_and_nothing_is_saved(
    client: Client, tenant: Tenant, overrides: dict[str, Any], field: str, message: str
) -> None:
    job_factory(tenant, name="extract")

    response = client.post(ADD, {**dependent(tenant, "extract"), **overrides})

    assert response.status_code == 200
    assert any(message in text for text in errors_of(response).get(field, [])), errors_of(response)
    assert not Job.objects.filter(name="nightly-report").exists()
    assert not JobDependency.objects.exists()


def test_a_parent_of_another_tenant_is_not_found(client: Client, tenant: Tenant) -> None:
    job_factory(tenant_factory("globex-inc"), name="theirs")

    response = client.post(ADD, dependent(tenant, "theirs"))

    assert "no live job of this tenant is named 'theirs'" in errors_of(response)["depends_on"]
    assert not JobDependency.objects.exists()


def test_editing_into_a_cycle_is_refused(client: Client, tenant: Tenant) -> None:
    parent = job_factory(tenant, name="extract")
    client.post(ADD, dependent(tenant, "extract"))
    child = Job.objects.get(name="nightly-report")
    data = dependent(tenant, "nightly-report", name="extract", expected_version=parent.version)

    response = client.post(reverse("admin:jobs_job_change", args=[parent.pk]), data)

    assert "cycle" in " ".join(errors_of(response)["depends_on"])
    parent.refresh_from_db()
    assert (parent.kind, parents_of(parent), parents_of(child)) == ("cron", set(), {"extract"})


def test_edit_page_lists_parents_and_an_unrelated_edit_keeps_them(
    client: Client, tenant: Tenant
) -> None:
    job_factory(tenant, name="extract")
    client.post(ADD, dependent(tenant, "extract"))
    child = Job.objects.get(name="nightly-report")
    url = reverse("admin:jobs_job_change", args=[child.pk])

    page = client.get(url)
    form = page.context["adminform"].form
    data = dependent(tenant, form.initial["depends_on"], priority=8, expected_version=1)
    data.pop("tenant")
    response = client.post(url, data)

    assert form.initial["depends_on"] == "extract"
    assert response.status_code == 302, errors_of(response)
    child.refresh_from_db()
    assert (child.priority, child.version, parents_of(child)) == (8, 2, {"extract"})


def test_cancel_refuses_a_parent_with_live_children_unless_cascading(
    client: Client, tenant: Tenant
) -> None:
    parent = job_factory(tenant, name="extract")
    client.post(ADD, dependent(tenant, "extract"))
    child = Job.objects.get(name="nightly-report")
    listing = reverse("admin:jobs_job_changelist")

    refused = client.post(
        listing, {"action": "cancel", "_selected_action": [str(parent.pk)]}, follow=True
    )
    parent.refresh_from_db()
    assert parent.status == JobStatus.ACTIVE
    assert any("live dependents" in str(m) for m in refused.context["messages"])

    client.post(listing, {"action": "cancel_with_dependents", "_selected_action": [str(parent.pk)]})

    parent.refresh_from_db()
    child.refresh_from_db()
    assert (parent.status, child.status) == (JobStatus.CANCELLED, JobStatus.CANCELLED)


def test_job_list_says_a_dependent_job_runs_after_its_parents(
    client: Client, tenant: Tenant
) -> None:
    job_factory(tenant, name="extract")
    client.post(ADD, dependent(tenant, "extract"))

    listing = client.get(reverse("admin:jobs_job_changelist")).content.decode()

    assert "after its parents" in listing
