"""Request helpers for API tests: a tenant with a key, and a JSON client that sends it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.test import Client

from jobs.models import Tenant
from jobs.services.tenants import api_key_create, tenant_create
from tests.support.factories import T0

JSON = "application/json"


@dataclass
class ApiClient:
    """A Django test client that authenticates as one tenant and speaks JSON."""

    tenant: Tenant
    key: str
    client: Client

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **(headers or {})}

    def get(self, path: str, headers: dict[str, str] | None = None, **query: Any) -> Any:
        return self.client.get(path, query or None, headers=self._headers(headers))

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = "" if body is None else json.dumps(body)
        return self.client.post(path, data, content_type=JSON, headers=self._headers(headers))

    def patch(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self.client.patch(
            path, json.dumps(body), content_type=JSON, headers=self._headers(headers)
        )

    def delete(self, path: str, headers: dict[str, str] | None = None) -> Any:
        return self.client.delete(path, headers=self._headers(headers))


def api_client_for(name: str, *, now: datetime = T0) -> ApiClient:
    tenant = tenant_create(name=name, now=now)
    _, key = api_key_create(tenant=tenant, name="tests", now=now)
    return ApiClient(tenant=tenant, key=key, client=Client())


def job_body(**overrides: Any) -> dict[str, Any]:
    """A valid create body: a cron job on the demo callable."""
    body: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": "0 9 * * *",
        "timezone": "Europe/Paris",
        "target": {"kind": "callable", "name": "demo.heartbeat"},
        "payload": {"report": "sales"},
    }
    body.update(overrides)
    return body


def error_fields(response: Any) -> dict[str, list[str]]:
    body = response.json()
    assert set(body) == {"error", "request_id"}, body
    fields: dict[str, list[str]] = body["error"].get("fields", {})
    return fields
