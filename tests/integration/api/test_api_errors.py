"""Bad input, auth, throttling and request ids: one error shape, a 4xx, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from jobs.models import Job
from jobs.services.tenants import api_key_revoke
from tests.support.api import ApiClient, api_client_for, error_fields, job_body
from tests.support.factories import T0

pytestmark = pytest.mark.django_db


HTTP = {"kind": "http", "url": "https://93.184.216.34/hook"}

BAD_CREATES: list[tuple[str, dict[str, Any], str]] = [
    ("malformed cron", {"schedule": "61 * * * *"}, "schedule"),
    ("never-firing cron", {"schedule": "0 0 30 2 *"}, "schedule"),
    ("cron with control char", {"schedule": "0 9 * * *\n"}, "schedule"),
    ("unknown timezone", {"timezone": "Mars/Olympus"}, "timezone"),
    ("offset as timezone", {"timezone": "+02:00"}, "timezone"),
    ("two schedule kinds", {"interval_sec": 60}, "schedule"),
    ("no schedule kind", {"schedule": None}, "schedule"),
    ("run_at in the past", {"schedule": None, "run_at": "2025-12-31T00:00:00Z"}, "run_at"),
    ("run_at too far", {"schedule": None, "run_at": "2040-01-01T00:00:00Z"}, "run_at"),
    ("naive run_at", {"schedule": None, "run_at": "2026-01-02T09:00:00"}, "run_at"),
    ("zero interval", {"schedule": None, "interval_sec": 0}, "interval_sec"),
    ("absurd interval", {"schedule": None, "interval_sec": 10**12}, "interval_sec"),
    ("zero attempts", {"retries": {"max_attempts": 0}}, "retries"),
    ("absurd attempts", {"retries": {"max_attempts": 10**9}}, "retries"),
    ("negative backoff", {"retries": {"base_delay_sec": -1}}, "retries"),
    ("max below base", {"retries": {"base_delay_sec": 60, "max_delay_sec": 10}}, "retries"),
    ("negative timeout", {"timeout_sec": -5}, "timeout_sec"),
    ("absurd timeout", {"timeout_sec": 99_999_999}, "timeout_sec"),
    ("negative jitter", {"jitter_sec": -1}, "jitter_sec"),
    ("absurd jitter", {"jitter_sec": 86_400}, "jitter_sec"),
    ("priority out of range", {"priority": 42}, "priority"),
    ("catch-up limit too big", {"catchup": {"limit": 10**6}}, "catchup.limit"),
    ("unknown target kind", {"target": {"kind": "shell", "name": "rm"}}, "target.kind"),
    ("unregistered callable", {"target": {"kind": "callable", "name": "os.system"}}, "target.name"),
    ("unregistered task", {"target": {"kind": "task", "name": "nope.task"}}, "target.name"),
    ("loopback target", {"target": {**HTTP, "url": "https://127.0.0.1/x"}}, "target.url"),
    ("localhost target", {"target": {**HTTP, "url": "https://localhost/x"}}, "target.url"),
    ("private target", {"target": {**HTTP, "url": "https://10.1.2.3/x"}}, "target.url"),
    ("metadata target", {"target": {**HTTP, "url": "https://169.254.169.254/"}}, "target.url"),
    (
        "mapped ipv6 target",
        {"target": {**HTTP, "url": "https://[::ffff:127.0.0.1]/"}},
        "target.url",
    ),
    ("plain http", {"target": {**HTTP, "url": "http://93.184.216.34/x"}}, "target.url"),
    ("credentials in url", {"target": {**HTTP, "url": "https://u:p@93.184.216.34/"}}, "target.url"),
    (
        "header injection",
        {"target": {**HTTP, "headers": {"X-A": "1\r\nHost: x"}}},
        "target.headers",
    ),
    ("bad header name", {"target": {**HTTP, "headers": {"X A": "1"}}}, "target.headers"),
    ("forbidden header", {"target": {**HTTP, "headers": {"Host": "evil"}}}, "target.headers"),
    ("payload too big", {"payload": {"blob": "x" * (256 * 1024)}}, "payload"),
    ("payload with NUL", {"payload": {"a": "\u0000"}}, "payload"),
    ("unknown field", {"cron": "0 9 * * *"}, "cron"),
    ("unknown nested field", {"retries": {"attempts": 3}}, "retries.attempts"),
    ("wrong type", {"priority": "high"}, "priority"),
    ("bad concurrency policy", {"concurrency_policy": "sometimes"}, "concurrency_policy"),
    ("blank name", {"name": "  "}, "name"),
]


@pytest.mark.parametrize(
    ("overrides", "field"), [(o, f) for _, o, f in BAD_CREATES], ids=[c[0] for c in BAD_CREATES]
)
def test_bad_create_is_400_with_field_and_writes_nothing(
    alice: ApiClient, overrides: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/jobs", job_body(**overrides))

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "invalid"
    assert field in error_fields(response), response.json()
    assert response.json()["request_id"] == response["X-Request-ID"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{not json", "application/json"),
        ("[1, 2]", "application/json"),
        ('{"a": NaN}', "application/json"),
        ("[" * 100_000 + "]" * 100_000, "application/json"),
        ("name=x", "application/x-www-form-urlencoded"),
        ("hello", "text/plain"),
    ],
    ids=["malformed", "array", "nan", "deep", "form", "text"],
)
def test_non_json_body_is_400(alice: ApiClient, body: str, content_type: str) -> None:
    response = alice.client.post(
        "/v1/jobs", body, content_type=content_type, headers=alice._headers(None)
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_json"
    assert Job.objects.count() == 0


def test_patch_with_bad_values_changes_nothing(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(f"/v1/jobs/{job_id}", {"payload": {"v": 2}, "timezone": "Nowhere"})

    assert response.status_code == 400
    assert "timezone" in error_fields(response)
    job = Job.objects.get(id=job_id)
    assert (job.version, job.payload) == (1, {"report": "sales"})


def test_patch_status_cancelled_is_refused(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(f"/v1/jobs/{job_id}", {"status": "cancelled"})

    assert response.status_code == 400
    assert "status" in error_fields(response)


def test_duplicate_name_is_400(alice: ApiClient) -> None:
    alice.post("/v1/jobs", job_body())

    response = alice.post("/v1/jobs", job_body())

    assert response.status_code == 400
    assert "name" in error_fields(response)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer sk_nope_nope", "Basic dXNlcjpwYXNz", "Bearer not-a-key"],
)
def test_missing_or_bad_key_is_401_with_www_authenticate(authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}

    response = Client().get("/v1/jobs", headers=headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] in {"not_authenticated", "authentication_failed"}


def test_revoked_key_is_401(alice: ApiClient) -> None:
    prefix = alice.key.removeprefix("sk_").split("_")[0]
    api_key_revoke(prefix=prefix, now=T0)

    assert alice.get("/v1/jobs").status_code == 401


def test_request_id_is_echoed_or_generated(alice: ApiClient) -> None:
    given = alice.get("/v1/jobs", headers={"X-Request-ID": "abc-123"})
    odd = alice.get("/v1/jobs", headers={"X-Request-ID": "bad id\twith space"})

    assert given["X-Request-ID"] == "abc-123"
    assert odd["X-Request-ID"] != "bad id\twith space"
    assert len(odd["X-Request-ID"]) == 32


@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"tenant": "3/min"}})
def test_throttle_is_per_tenant(alice: ApiClient) -> None:
    bob = api_client_for("bob")

    codes = [alice.get("/v1/jobs").status_code for _ in range(4)]
    limited = alice.get("/v1/jobs")

    assert codes == [200, 200, 200, 429]
    assert int(limited["Retry-After"]) >= 1
    assert limited.json()["error"]["code"] == "throttled"
    assert bob.get("/v1/jobs").status_code == 200


def test_unknown_path_under_v1_answers_in_the_error_shape(alice: ApiClient) -> None:
    response = alice.get("/v1/no-such-thing")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_bad_query_parameters_are_400(alice: ApiClient) -> None:
    assert alice.get("/v1/jobs", status="sleeping").status_code == 400
    assert alice.get("/v1/jobs", limit="0").status_code == 400
    assert alice.get("/v1/jobs", cursor="garbage!").status_code == 400
    assert alice.get("/v1/jobs", bogus="1").status_code == 400
