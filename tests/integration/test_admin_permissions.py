"""Who may do what in the job admin: view-only staff change nothing, tenant staff stay in
their tenant (in lists, in the form and by URL), superusers see every tenant."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobs.models import DeadLetter, Job, Tenant, TenantMember
from jobs.states import RunState
from tests.support.admin import form_data
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")
VIEW = ["view_job", "view_jobrun", "view_deadletter", "view_tenant"]
EDIT = [*VIEW, "add_job", "change_job", "delete_job", "change_tenant", "delete_tenant"]


def login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff(tenant: Tenant | None, codenames: list[str], name: str = "staff") -> Client:
    # No password: force_login needs none, and hashing one costs more than the test.
    user = User.objects.create(username=name, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="jobs", codename__in=codenames)
    )
    if tenant is not None:
        TenantMember.objects.create(user=user, tenant=tenant)
    return login(user)


def change_url(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def definition(job: Job, **overrides: Any) -> dict[str, Any]:
    data = form_data(
        job.tenant_id,
        name=job.name,
        cron_expression=job.cron_expression,
        timezone=job.timezone,
        payload="{}",
        expected_version=job.version,
    )
    data.update(overrides)
    return data


def test_view_only_staff_cannot_add_edit_or_delete_jobs() -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(tenant, cron="* * * * *", target_headers={})
    client = staff(tenant, VIEW)

    add_page = client.get(ADD)
    added = client.post(ADD, form_data(tenant.pk, name="sneaky"))
    page = client.get(change_url(job))
    edited = client.post(change_url(job), definition(job, priority=1))
    deleted = client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})

    assert (add_page.status_code, added.status_code, deleted.status_code) == (403, 403, 403)
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="priority"' not in body
    assert "Save" not in body
    assert edited.status_code == 403
    job.refresh_from_db()
    assert (job.priority, job.version) == (5, 1)
    assert list(Job.objects.values_list("name", flat=True)) == [job.name]


def test_view_only_page_shows_header_names_not_values() -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(
        tenant,
        target_kind="http",
        target_name="",
        target_url="https://93.184.216.34/hook",
        target_headers={"Authorization": "Bearer s3cret-token"},
    )
    client = staff(tenant, VIEW)

    body = client.get(change_url(job)).content.decode()

    assert "Authorization" in body
    assert "s3cret-token" not in body


def test_tenant_staff_create_jobs_only_for_their_own_tenant() -> None:
    mine, theirs = tenant_factory("acme-corp"), tenant_factory("globex-inc")
    client = staff(mine, EDIT)

    page = client.get(ADD).content.decode()
    refused = client.post(ADD, form_data(theirs.pk, name="planted"))
    created = client.post(ADD, form_data(mine.pk, name="own-job"))

    assert "acme-corp" in page
    assert "globex-inc" not in page
    assert "tenant" in refused.context["adminform"].form.errors
    assert not Job.objects.filter(name="planted").exists()
    assert created.status_code == 302
    assert Job.objects.get(name="own-job").tenant == mine


def test_tenant_staff_cannot_reach_another_tenants_objects_by_url() -> None:
    mine, theirs = tenant_factory("acme-corp"), tenant_factory("globex-inc")
    job = job_factory(theirs, cron="* * * * *")
    run = run_factory(job, state=RunState.DEAD, attempt=3, finished_at=T0, due_at=None)
    letter = DeadLetter.objects.create(
        run=run, job=job, tenant=theirs, attempts=3, last_error="boom", moved_at=T0
    )
    client = staff(mine, [*EDIT, "change_jobrun", "change_deadletter"])

    pages = [
        client.get(change_url(job)),
        client.post(change_url(job), definition(job, priority=1)),
        client.get(reverse("admin:jobs_job_history", args=[job.pk])),
        client.get(reverse("admin:jobs_jobrun_change", args=[run.pk])),
        client.get(reverse("admin:jobs_deadletter_change", args=[letter.pk])),
        client.get(reverse("admin:jobs_tenant_change", args=[theirs.pk])),
    ]

    assert [p.status_code for p in pages] == [404] * len(pages)
    job.refresh_from_db()
    assert (job.priority, job.version) == (5, 1)


def test_tenant_staff_edit_their_own_jobs() -> None:
    mine = tenant_factory("acme-corp")
    job = job_factory(mine, cron="* * * * *")
    client = staff(mine, EDIT)

    response = client.post(change_url(job), definition(job, priority=2))

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.priority, job.version) == (2, 2)


def test_tenant_staff_cannot_change_their_tenant() -> None:
    mine = tenant_factory("acme-corp")
    client = staff(mine, EDIT)

    response = client.post(
        reverse("admin:jobs_tenant_change", args=[mine.pk]),
        {"name": "acme-corp", "is_active": "on", "max_queued_runs": 999_999_999},
    )

    assert response.status_code == 403
    mine.refresh_from_db()
    assert mine.max_queued_runs == 100_000


def test_staff_without_a_tenant_can_add_nothing() -> None:
    tenant = tenant_factory("acme-corp")
    client = staff(None, EDIT)

    assert client.get(ADD).status_code == 403
    assert client.post(ADD, form_data(tenant.pk)).status_code == 403
    assert not Job.objects.exists()


def test_jobs_are_never_deleted_from_the_admin_only_cancelled() -> None:
    job = job_factory(cron="* * * * *")
    client = login(User.objects.create(username="root", is_staff=True, is_superuser=True))

    response = client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})
    listing = client.get(reverse("admin:jobs_job_changelist")).content.decode()

    assert response.status_code == 403
    assert 'value="delete_selected"' not in listing
    assert Job.objects.filter(pk=job.pk).exists()


def test_superuser_picks_any_active_tenant_and_view_site_leads_to_status() -> None:
    tenant_factory("acme-corp"), tenant_factory("globex-inc")
    client = login(User.objects.create(username="root", is_staff=True, is_superuser=True))

    page = client.get(ADD).content.decode()
    index = client.get(reverse("admin:index")).content.decode()

    assert "acme-corp" in page
    assert "globex-inc" in page
    assert 'href="/status/"' in index


def test_result_backend_pages_answer_only_superusers() -> None:
    # TaskResult rows carry no tenant: staff holding the library's view permission would
    # otherwise read every tenant's stored results and tracebacks.
    tenant = tenant_factory(name="acme")
    user = User.objects.create(username="results-reader", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_celery_results",
            codename__in=["view_taskresult", "view_groupresult"],
        )
    )
    TenantMember.objects.create(user=user, tenant=tenant)
    reader = login(user)
    listing = reverse("admin:django_celery_results_taskresult_changelist")
    assert reader.get(listing).status_code == 403
    assert "django_celery_results" not in reader.get(reverse("admin:index")).content.decode()
    root = login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    assert root.get(listing).status_code == 200
