"""The admin lists every model, its actions call the services, and staff see one tenant."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobs.models import ApiKey, DeadLetter, Job, JobRun, JobStatus, Tenant, TenantMember
from jobs.services.dedup import dedup_record
from jobs.services.tenants import api_key_authenticate, api_key_create
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db

MODELS = ["tenant", "apikey", "job", "jobrun", "deadletter", "dedupkey", "partitionepoch"]


@pytest.fixture
def superuser_client() -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw-unused-123")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("model", MODELS)
def test_every_changelist_renders(superuser_client: Client, model: str) -> None:
    job = job_factory()
    run_factory(job)
    response = superuser_client.get(reverse(f"admin:jobs_{model}_changelist"))
    assert response.status_code == 200


def test_job_page_shows_recent_runs(superuser_client: Client) -> None:
    job = job_factory()
    run = run_factory(job)
    response = superuser_client.get(reverse("admin:jobs_job_change", args=[job.pk]))
    assert response.status_code == 200
    assert run.scheduled_for.isoformat() in response.content.decode()


@pytest.mark.parametrize(
    ("action", "status"),
    [("pause", JobStatus.PAUSED), ("cancel", JobStatus.CANCELLED)],
)
def test_job_actions_call_services(superuser_client: Client, action: str, status: str) -> None:
    job = job_factory()
    response = superuser_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": action, "_selected_action": [str(job.pk)]},
    )
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == status
    assert job.version == 2


def test_trigger_now_action_creates_pending_run(superuser_client: Client) -> None:
    job = job_factory()
    superuser_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "trigger_now", "_selected_action": [str(job.pk)]},
    )
    assert JobRun.objects.get(job=job).state == RunState.PENDING


def test_resume_of_active_job_is_harmless(superuser_client: Client) -> None:
    job = job_factory()
    superuser_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "resume", "_selected_action": [str(job.pk)]},
    )
    job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE
    assert job.version == 1


def test_staff_sees_only_their_tenant() -> None:
    mine, theirs = tenant_factory(), tenant_factory()
    my_job, their_job = job_factory(mine), job_factory(theirs)
    staff = User.objects.create_user("staff", password="pw-unused-123", is_staff=True)
    staff.user_permissions.set(
        __import__("django.contrib.auth.models", fromlist=["Permission"]).Permission.objects.filter(
            content_type__app_label="jobs"
        )
    )
    TenantMember.objects.create(user=staff, tenant=mine)
    client = Client()
    client.force_login(staff)
    body = client.get(reverse("admin:jobs_job_changelist")).content.decode()
    assert my_job.name in body
    assert their_job.name not in body
    assert client.get(reverse("admin:jobs_job_change", args=[their_job.pk])).status_code == 404
    assert Job.objects.count() == 2


def test_dead_letter_replay_action_queues_a_new_attempt(superuser_client: Client) -> None:
    job = job_factory()
    run = run_factory(job, state=RunState.DEAD, attempt=3, finished_at=job.created_at, due_at=None)
    letter = DeadLetter.objects.create(
        run=run, job=job, tenant=job.tenant, attempts=3, last_error="boom", moved_at=job.created_at
    )
    response = superuser_client.post(
        reverse("admin:jobs_deadletter_changelist"),
        {"action": "replay", "_selected_action": [str(letter.pk)]},
    )
    assert response.status_code == 302
    run.refresh_from_db()
    letter.refresh_from_db()
    assert run.state == RunState.PENDING
    assert run.due_at is not None
    assert letter.replay_count == 1


def test_api_key_created_in_admin_is_shown_once_and_stored_hashed(
    superuser_client: Client,
) -> None:
    tenant = tenant_factory()
    response = superuser_client.post(
        reverse("admin:jobs_apikey_add"), {"tenant": tenant.pk, "name": "ci"}, follow=True
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    plaintext = next(word for m in shown for word in m.split() if word.startswith("sk_"))
    key = ApiKey.objects.get(tenant=tenant, name="ci")
    assert plaintext not in key.key_hash
    assert api_key_authenticate(plaintext=plaintext, now=key.created_at) == key
    page = superuser_client.get(reverse("admin:jobs_apikey_change", args=[key.pk]))
    assert plaintext not in page.content.decode()
    assert key.key_hash not in page.content.decode()


def _staff(tenant: Tenant, *codenames: str) -> Client:
    """A staff account of one tenant holding only the given jobs permissions."""
    staff = User.objects.create_user(
        f"staff-{tenant.name}", password="pw-unused-123", is_staff=True
    )
    staff.user_permissions.set(
        Permission.objects.filter(content_type__app_label="jobs", codename__in=codenames)
    )
    TenantMember.objects.create(user=staff, tenant=tenant)
    client = Client()
    client.force_login(staff)
    return client


VIEW_ALL = [f"view_{model}" for model in MODELS] + ["view_tenantmember"]
CHANGE_ALL = [f"change_{model}" for model in MODELS] + ["change_tenantmember"]


@pytest.mark.parametrize("model", ["job", "jobrun", "deadletter", "dedupkey", "apikey"])
def test_list_filters_name_only_the_staff_members_tenant(model: str) -> None:
    mine, theirs = tenant_factory("acme-corp"), tenant_factory("globex-inc")
    for tenant in (mine, theirs):
        job = job_factory(tenant)
        run = run_factory(job, state=RunState.DEAD, attempt=3, finished_at=T0, due_at=None)
        DeadLetter.objects.create(
            run=run, job=job, tenant=tenant, attempts=3, last_error="boom", moved_at=T0
        )
        dedup_record(
            key=f"k-{tenant.name}", tenant_id=tenant.pk, job_id=job.id, run_id=run.id, now=T0
        )
        api_key_create(tenant=tenant, name=f"key-{tenant.name}", now=T0)
    client = _staff(mine, *VIEW_ALL, *CHANGE_ALL)

    response = client.get(reverse(f"admin:jobs_{model}_changelist"))

    assert response.status_code == 200
    body = response.content.decode()
    assert "acme-corp" in body
    assert "globex-inc" not in body


def test_superuser_filters_still_offer_every_tenant(superuser_client: Client) -> None:
    tenant_factory("acme-corp"), tenant_factory("globex-inc")

    body = superuser_client.get(reverse("admin:jobs_job_changelist")).content.decode()

    assert "acme-corp" in body
    assert "globex-inc" in body


def test_staff_cannot_see_or_grant_tenant_memberships() -> None:
    mine, theirs = tenant_factory("acme-corp"), tenant_factory("globex-inc")
    client = _staff(mine, *VIEW_ALL, *CHANGE_ALL, "add_tenantmember")
    user = User.objects.get(username="staff-acme-corp")

    listing = client.get(reverse("admin:jobs_tenantmember_changelist"))
    granted = client.post(
        reverse("admin:jobs_tenantmember_add"), {"user": user.pk, "tenant": theirs.pk}
    )

    assert listing.status_code == 403
    assert granted.status_code == 403
    assert TenantMember.objects.get(user=user).tenant == mine


JOB_ACTIONS = ["pause", "resume", "cancel", "trigger_now"]


@pytest.mark.parametrize("action", JOB_ACTIONS)
def test_view_only_staff_cannot_run_job_actions(action: str) -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(tenant)
    if action == "resume":
        Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    before = Job.objects.values_list("status", "version").get(pk=job.pk)
    client = _staff(tenant, *VIEW_ALL)

    page = client.get(reverse("admin:jobs_job_changelist")).content.decode()
    response = client.post(
        reverse("admin:jobs_job_changelist"), {"action": action, "_selected_action": [str(job.pk)]}
    )

    assert f'value="{action}"' not in page
    assert response.status_code in {200, 302}
    assert Job.objects.values_list("status", "version").get(pk=job.pk) == before
    assert JobRun.objects.count() == 0


def test_staff_with_change_permission_can_run_job_actions() -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(tenant)
    client = _staff(tenant, *VIEW_ALL, "change_job")

    response = client.post(
        reverse("admin:jobs_job_changelist"), {"action": "pause", "_selected_action": [str(job.pk)]}
    )

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.version) == (JobStatus.PAUSED, 2)


def test_view_only_staff_cannot_replay_dead_letters() -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(tenant)
    run = run_factory(job, state=RunState.DEAD, attempt=3, finished_at=T0, due_at=None)
    letter = DeadLetter.objects.create(
        run=run, job=job, tenant=tenant, attempts=3, last_error="boom", moved_at=T0
    )
    client = _staff(tenant, *VIEW_ALL)

    page = client.get(reverse("admin:jobs_deadletter_changelist")).content.decode()
    client.post(
        reverse("admin:jobs_deadletter_changelist"),
        {"action": "replay", "_selected_action": [str(letter.pk)]},
    )

    assert 'value="replay"' not in page
    run.refresh_from_db()
    letter.refresh_from_db()
    assert (run.state, letter.replay_count) == (RunState.DEAD, 0)


def test_staff_with_change_permission_can_replay_dead_letters() -> None:
    tenant = tenant_factory("acme-corp")
    job = job_factory(tenant)
    run = run_factory(job, state=RunState.DEAD, attempt=3, finished_at=T0, due_at=None)
    letter = DeadLetter.objects.create(
        run=run, job=job, tenant=tenant, attempts=3, last_error="boom", moved_at=T0
    )
    client = _staff(tenant, *VIEW_ALL, "change_deadletter")

    client.post(
        reverse("admin:jobs_deadletter_changelist"),
        {"action": "replay", "_selected_action": [str(letter.pk)]},
    )

    run.refresh_from_db()
    assert run.state == RunState.PENDING


def test_tenant_staff_cannot_revoke_keys() -> None:
    tenant = tenant_factory("acme-corp")
    key, _ = api_key_create(tenant=tenant, name="ci", now=T0)
    client = _staff(tenant, *VIEW_ALL, *CHANGE_ALL)

    client.post(
        reverse("admin:jobs_apikey_changelist"),
        {"action": "revoke", "_selected_action": [str(key.pk)]},
    )

    key.refresh_from_db()
    assert key.revoked_at is None
