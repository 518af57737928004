"""/v1/webhooks: create (secret shown once), list, read, change, rotate, delete; URLs judged
by the HTTP targets' rules (shape, SSRF policy) with a field error and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models_notifications import NotificationWebhook
from jobs.services.webhooks import webhook_secret
from tests.support.api import ApiClient, api_client_for, error_fields
from tests.support.resolver import ResolverStub

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"


@pytest.fixture
def public_host(fake_dns: ResolverStub) -> str:
    fake_dns.register("hooks.partner.test", PUBLIC)
    return "https://hooks.partner.test/scheduler"


def _body(url: str, **overrides: Any) -> dict[str, Any]:
    return {"name": "on-call", "url": url, "events": ["dead_letter"], **overrides}


def test_create_shows_the_secret_once_then_list_and_read_do_not(
    alice: ApiClient, public_host: str
) -> None:
    response = alice.post("/v1/webhooks", _body(public_host))
    assert response.status_code == 201, response.content
    created = response.json()
    hook = NotificationWebhook.objects.get(id=created["webhook_id"])
    assert created["secret"] == webhook_secret(hook.id, 1)
    assert created["events"] == ["dead_letter"]
    assert created["enabled"] is True
    assert response["Location"] == f"/v1/webhooks/{hook.id}"

    listed = alice.get("/v1/webhooks").json()["results"]
    assert [w["webhook_id"] for w in listed] == [str(hook.id)]
    assert "secret" not in listed[0]
    item = alice.get(f"/v1/webhooks/{hook.id}").json()
    assert "secret" not in item
    assert item["recent_deliveries"] == []


def test_patch_changes_fields_and_rotating_returns_a_new_secret(
    alice: ApiClient, public_host: str
) -> None:
    created = alice.post("/v1/webhooks", _body(public_host)).json()
    path = f"/v1/webhooks/{created['webhook_id']}"
    changed = alice.patch(path, {"events": ["sustained_lateness", "dead_letter"], "enabled": False})
    assert changed.status_code == 200, changed.content
    assert changed.json()["events"] == ["dead_letter", "sustained_lateness"]
    assert changed.json()["enabled"] is False
    assert "secret" not in changed.json()
    rotated = alice.patch(path, {"rotate_secret": True}).json()
    assert rotated["secret"] != created["secret"]
    hook = NotificationWebhook.objects.get(id=created["webhook_id"])
    assert rotated["secret"] == webhook_secret(hook.id, 2)
    assert alice.delete(path).status_code == 204
    assert not NotificationWebhook.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:127.0.0.1]/x",
        "http://hooks.partner.test/plain-http",
        "https://user:pw@hooks.partner.test/x",
        "ftp://hooks.partner.test/x",
        "not a url",
        "https://does-not-exist.invalid/x",
    ],
)
def test_a_refused_url_is_400_on_url_and_writes_nothing(
    alice: ApiClient, public_host: str, url: str
) -> None:
    response = alice.post("/v1/webhooks", _body(url))
    assert response.status_code == 400, response.content
    assert "url" in error_fields(response)
    assert not NotificationWebhook.objects.exists()
    created = alice.post("/v1/webhooks", _body(public_host)).json()
    patched = alice.patch(f"/v1/webhooks/{created['webhook_id']}", {"url": url})
    assert patched.status_code == 400
    assert "url" in error_fields(patched)
    NotificationWebhook.objects.all().delete()


def test_a_name_resolving_to_a_private_address_is_refused(
    alice: ApiClient, fake_dns: ResolverStub
) -> None:
    fake_dns.register("inside.partner.test", "192.168.1.20")
    response = alice.post("/v1/webhooks", _body("https://inside.partner.test/x"))
    assert response.status_code == 400
    assert "url" in error_fields(response)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"events": []}, "events"),
        ({"events": ["everything"]}, "events.0"),
        ({"events": "dead_letter"}, "events"),
        ({"enabled": "yes"}, "enabled"),
        ({"name": ""}, "name"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_fields_are_400_naming_the_field(
    alice: ApiClient, public_host: str, overrides: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/webhooks", _body(public_host, **overrides))
    assert response.status_code == 400, response.content
    assert field in error_fields(response)


def test_a_duplicate_name_is_400(alice: ApiClient, public_host: str) -> None:
    assert alice.post("/v1/webhooks", _body(public_host)).status_code == 201
    again = alice.post("/v1/webhooks", _body(public_host))
    assert again.status_code == 400
    assert "name" in error_fields(again)


def test_another_tenant_gets_404_and_an_empty_list(alice: ApiClient, public_host: str) -> None:
    created = alice.post("/v1/webhooks", _body(public_host)).json()
    bob = api_client_for("bob")
    path = f"/v1/webhooks/{created['webhook_id']}"
    assert bob.get(path).status_code == 404
    assert bob.patch(path, {"enabled": False}).status_code == 404
    assert bob.delete(path).status_code == 404
    assert bob.get("/v1/webhooks").json()["results"] == []
    assert NotificationWebhook.objects.get().enabled is True


def test_the_endpoints_are_in_the_openapi_schema(alice: ApiClient) -> None:
    paths = alice.get("/v1/openapi.json").json()["paths"]
    assert set(paths["/v1/webhooks"]) >= {"get", "post"}
    assert set(paths["/v1/webhooks/{webhook_id}"]) >= {"get", "patch", "delete"}
