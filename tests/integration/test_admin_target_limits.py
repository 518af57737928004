"""Admin for per-target rate limits: rows saved through the services with their checks shown
on the field, tenant-scoped staff limited to their tenant; the job form's rate-limit fields."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobs.models import Job, TargetLimit, TenantMember
from tests.support.admin import form_data
from tests.support.factories import T0, tenant_factory

pytestmark = pytest.mark.django_db

ADD = "admin:jobs_targetlimit_add"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-unused-1"))
    return client


def test_add_and_change_save_through_the_services(root: Client) -> None:
    tenant = tenant_factory()
    form = {"tenant": tenant.pk, "target": "API.Example.com", "rate_per_s": "2.5", "burst": "4"}
    response = root.post(reverse(ADD), form, follow=True)
    assert response.status_code == 200
    limit = TargetLimit.objects.get()
    assert (limit.tenant_id, limit.target, limit.rate_per_s, limit.burst) == (
        tenant.id, "api.example.com", 2.5, 4,
    )  # fmt: skip
    change = reverse("admin:jobs_targetlimit_change", args=[limit.pk])
    root.post(change, {"rate_per_s": "1", "burst": "2"}, follow=True)
    limit.refresh_from_db()
    assert (limit.target, limit.rate_per_s, limit.burst) == ("api.example.com", 1.0, 2)


@pytest.mark.parametrize(
    ("field", "value"), [("rate_per_s", "0"), ("burst", "0"), ("target", "two words")]
)
def test_a_bad_value_is_a_form_error_and_nothing_is_saved(
    root: Client, field: str, value: str
) -> None:
    tenant = tenant_factory()
    form = {"tenant": tenant.pk, "target": "api.test", "rate_per_s": "1", "burst": "1"}
    response = root.post(reverse(ADD), {**form, field: value})
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not TargetLimit.objects.exists()


def test_tenant_staff_see_only_their_tenants_limits() -> None:
    ours, theirs = tenant_factory(), tenant_factory()
    for tenant in (ours, theirs):
        TargetLimit.objects.create(
            tenant=tenant, target=f"t{tenant.pk}.test", rate_per_s=1, created_at=T0, updated_at=T0
        )
    user = User.objects.create_user("staff", password="pw-unused-2", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__endswith="targetlimit"))
    TenantMember.objects.create(user=user, tenant=ours)
    client = Client()
    client.force_login(user)
    page = client.get(reverse("admin:jobs_targetlimit_changelist")).content.decode()
    assert f"t{ours.pk}.test" in page
    assert f"t{theirs.pk}.test" not in page


def test_the_job_form_sets_the_jobs_rate_limit(root: Client) -> None:
    tenant = tenant_factory()
    data = form_data(tenant.pk, target_group="Payments", target_rate="0.5", target_burst="2")
    response = root.post(reverse("admin:jobs_job_add"), data, follow=True)
    assert response.status_code == 200
    job = Job.objects.get()
    assert (job.target_group, job.target_rate, job.target_burst) == ("payments", 0.5, 2)
    refused = root.post(
        reverse("admin:jobs_job_add"), form_data(tenant.pk, name="other", target_burst="2")
    )
    assert "target_burst" in refused.context["adminform"].form.errors
    assert Job.objects.count() == 1
