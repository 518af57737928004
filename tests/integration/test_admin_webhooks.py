"""Admin for notification webhooks: saved through the webhook services, the SSRF policy's
refusal shown on the url field, tenant-scoped staff limited to their tenant."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobs.models import Tenant, TenantMember
from jobs.models_notifications import NotificationDelivery, NotificationWebhook
from jobs.services.webhooks import webhook_create, webhook_secret
from tests.support.factories import T0, tenant_factory
from tests.support.resolver import ResolverStub

pytestmark = pytest.mark.django_db

ADD = "admin:jobs_notificationwebhook_add"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-unused-1"))
    return client


@pytest.fixture
def public_url(fake_dns: ResolverStub) -> str:
    fake_dns.register("hooks.partner.test", "93.184.216.34")
    return "https://hooks.partner.test/scheduler"


def _form(tenant: Tenant, url: str, **overrides: Any) -> dict[str, Any]:
    return {
        "tenant": tenant.pk, "name": "on-call", "url": url, "events": ["dead_letter"],
        "enabled": "on", **overrides,
    }  # fmt: skip


def test_add_creates_through_the_service_and_shows_the_secret_once(
    root: Client, public_url: str
) -> None:
    tenant = tenant_factory()
    response = root.post(reverse(ADD), _form(tenant, public_url), follow=True)
    assert response.status_code == 200
    hook = NotificationWebhook.objects.get()
    assert (hook.tenant_id, hook.url, hook.events) == (tenant.id, public_url, ["dead_letter"])
    assert webhook_secret(hook.id, 1) in response.content.decode()
    change = root.get(reverse("admin:jobs_notificationwebhook_change", args=[hook.pk]))
    assert webhook_secret(hook.id, 1) not in change.content.decode()


@pytest.mark.parametrize("url", ["https://10.1.2.3/x", "http://hooks.partner.test/x", "nope"])
def test_a_refused_url_is_a_form_error_and_nothing_is_saved(
    root: Client, public_url: str, url: str
) -> None:
    response = root.post(reverse(ADD), _form(tenant_factory(), url))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "url" in errors, errors
    assert not NotificationWebhook.objects.exists()


def test_rotate_action_gives_a_new_secret(root: Client, public_url: str) -> None:
    hook, old = webhook_create(
        tenant=tenant_factory(), name="h", url=public_url, events=["dead_letter"], now=T0
    )
    response = root.post(
        reverse("admin:jobs_notificationwebhook_changelist"),
        {"action": "rotate_secret", "_selected_action": [hook.pk]},
        follow=True,
    )
    hook.refresh_from_db()
    assert hook.secret_version == 2
    assert webhook_secret(hook.id, 2) in response.content.decode()
    assert old not in response.content.decode()


def _staff(tenant: Tenant, *codenames: str) -> Client:
    user = User.objects.create_user(f"staff-{tenant.name}", password="pw-unused-1", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="jobs", codename__in=codenames)
    )
    TenantMember.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_tenant_staff_see_and_create_only_for_their_tenant(public_url: str) -> None:
    mine, theirs = tenant_factory(), tenant_factory()
    own, _ = webhook_create(
        tenant=mine, name="mine", url=public_url, events=["dead_letter"], now=T0
    )
    other, _ = webhook_create(
        tenant=theirs, name="theirs", url=public_url, events=["dead_letter"], now=T0
    )
    client = _staff(mine, "view_notificationwebhook", "add_notificationwebhook")
    body = client.get(reverse("admin:jobs_notificationwebhook_changelist")).content.decode()
    assert "mine" in body
    assert "theirs" not in body
    change = reverse("admin:jobs_notificationwebhook_change", args=[other.pk])
    assert client.get(change).status_code == 404
    refused = client.post(reverse(ADD), _form(theirs, public_url, name="sneaky"))
    assert "tenant" in refused.context["adminform"].form.errors
    assert not NotificationWebhook.objects.filter(name="sneaky").exists()
    assert own.tenant_id == mine.id


def test_view_only_staff_cannot_change_or_rotate(public_url: str) -> None:
    tenant = tenant_factory()
    hook, _ = webhook_create(
        tenant=tenant, name="h", url=public_url, events=["dead_letter"], now=T0
    )
    client = _staff(tenant, "view_notificationwebhook", "view_notificationdelivery")
    change = reverse("admin:jobs_notificationwebhook_change", args=[hook.pk])
    client.post(change, _form(tenant, public_url, name="renamed"))
    client.post(
        reverse("admin:jobs_notificationwebhook_changelist"),
        {"action": "rotate_secret", "_selected_action": [hook.pk]},
    )
    hook.refresh_from_db()
    assert (hook.name, hook.secret_version) == ("h", 1)
    deliveries = client.get(reverse("admin:jobs_notificationdelivery_changelist"))
    assert deliveries.status_code == 200
    assert not NotificationDelivery.objects.exists()
