"""Hostile input found by probing the API: every case is a 4xx in the error shape, naming the
field, and writes nothing (row counts and the stored job are unchanged)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from jobs.models import Job, JobRun
from tests.support.api import JSON, ApiClient, error_fields, job_body
from tests.support.resolver import ResolverStub

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"


def _http(url: str) -> dict[str, Any]:
    return {"target": {"kind": "http", "url": url}}


def _assert_400(response: Any, field: str) -> None:
    assert response.status_code == 400, (response.status_code, response.content[:500])
    body = response.json()
    assert body["error"]["code"] == "invalid"
    assert field in error_fields(response), body
    assert body["request_id"] == response["X-Request-ID"]


def _counts() -> tuple[int, int]:
    return Job.objects.count(), JobRun.objects.count()


MALFORMED_URLS = [
    "https://127.0.0.1:99999/",
    "https://[::1",
    "https://[zz::1]/",
    "https://h:abc/",
    "https://h:-1/",
    "https://h:0/",
]


@pytest.mark.parametrize("url", MALFORMED_URLS)
def test_malformed_target_url_is_400_on_create(alice: ApiClient, url: str) -> None:
    response = alice.post("/v1/jobs", job_body(**_http(url)))

    _assert_400(response, "target.url")
    assert _counts() == (0, 0)


@pytest.mark.parametrize("url", MALFORMED_URLS)
def test_malformed_target_url_is_400_on_patch_and_bulk(alice: ApiClient, url: str) -> None:
    job_id = alice.post("/v1/jobs", job_body(**_http(f"https://{PUBLIC}/hook"))).json()["job_id"]

    patched = alice.patch(f"/v1/jobs/{job_id}", {"target": {"url": url}})
    bulk = alice.post("/v1/jobs/bulk", {"jobs": [job_body(name="b", **_http(url))]})

    _assert_400(patched, "target.url")
    _assert_400(bulk, "jobs[0].target.url")
    job = Job.objects.get(id=job_id)
    assert (job.version, job.target_url) == (1, f"https://{PUBLIC}/hook")
    assert _counts() == (1, 0)


EMBEDDED_PRIVATE_V6 = [
    "::127.0.0.1",  # IPv4-compatible (deprecated ::/96)
    "::169.254.169.254",
    "::a9fe:a9fe",  # the same, spelled in hex
    "::",
    "::ffff:10.0.0.1",  # IPv4-mapped
    "64:ff9b::7f00:1",  # NAT64 well-known prefix -> 127.0.0.1
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a9fe:a9fe",  # NAT64 local-use prefix, never public
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2002:7f00:1::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "fec0::1",  # deprecated site-local
]


@pytest.mark.parametrize("address", EMBEDDED_PRIVATE_V6)
def test_ipv6_forms_hiding_a_private_ipv4_address_are_refused(
    alice: ApiClient, address: str
) -> None:
    response = alice.post("/v1/jobs", job_body(**_http(f"https://[{address}]/hook")))

    _assert_400(response, "target.url")
    assert "not a public address" in response.json()["error"]["message"]
    assert _counts() == (0, 0)


@pytest.mark.parametrize("host", ["127.1", "0x7f.1", "2130706433", "017700000001", "0177.0.0.1"])
def test_legacy_spellings_of_loopback_are_refused(alice: ApiClient, host: str) -> None:
    # The C resolver reads these as 127.0.0.1, and so would the connection.
    response = alice.post("/v1/jobs", job_body(**_http(f"https://{host}/hook")))

    _assert_400(response, "target.url")
    assert "not a public address" in response.json()["error"]["message"]
    assert _counts() == (0, 0)


@pytest.mark.parametrize("address", ["::ffff:127.0.0.1", "::127.0.0.1", "2002:7f00:1::1"])
def test_a_name_resolving_to_a_hidden_private_address_is_refused(
    alice: ApiClient, fake_dns: ResolverStub, address: str
) -> None:
    fake_dns.register("hook.partner.test", address)

    response = alice.post("/v1/jobs", job_body(**_http("https://hook.partner.test/x")))

    _assert_400(response, "target.url")
    assert _counts() == (0, 0)


def test_public_names_and_embedded_public_addresses_are_accepted(
    alice: ApiClient, fake_dns: ResolverStub
) -> None:
    fake_dns.register("hook.partner.test", PUBLIC)
    urls = [
        "https://hook.partner.test/x",
        f"https://{PUBLIC}:8443/x",
        "https://[2606:2800:220:1:248:1893:25c8:1946]/x",
        f"https://[::ffff:{PUBLIC}]/x",
        f"https://[64:ff9b::{PUBLIC}]/x",
    ]

    codes = [
        alice.post("/v1/jobs", job_body(name=f"j{i}", **_http(u))).status_code
        for i, u in enumerate(urls)
    ]

    assert codes == [201] * len(urls)


def test_body_over_the_upload_limit_is_413_in_the_error_shape(alice: ApiClient) -> None:
    body = json.dumps(job_body(payload={"blob": "x" * (3 * 1024 * 1024)}))

    response = alice.client.post(
        "/v1/jobs", body, content_type=JSON, headers=alice._headers({"X-Request-ID": "big-1"})
    )

    assert response.status_code == 413, response.content[:300]
    payload = response.json()
    assert payload["error"]["code"] == "too_large"
    assert payload["request_id"] == "big-1" == response["X-Request-ID"]
    assert _counts() == (0, 0)


def _cursor(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor(b"[" * 100_000 + b"]" * 100_000),
        _cursor(b'{"k": ' + b"[" * 50_000 + b"]" * 50_000 + b', "b": false}'),
        _cursor({"k": ["2026-01-01T00:00:00+00:00"], "b": False}),  # too few keys
        _cursor({"k": [1, 2], "b": False}),
        _cursor({"k": ["2026-01-01T00:00:00+00:00", 5], "b": False}),
        _cursor([1, 2]),
        _cursor({"k": ["2026-01-01T00:00:00+00:00", "x" * 5000], "b": False}),
    ],
    ids=[
        "deep-list",
        "deep-keys",
        "short",
        "wrong-types",
        "number-as-uuid",
        "not-an-object",
        "long",
    ],
)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/dead-letters"])
def test_hostile_cursor_is_400(alice: ApiClient, cursor: str, path: str) -> None:
    response = alice.get(path, cursor=cursor)

    _assert_400(response, "cursor")


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules"])
def test_pseudo_time_zones_are_refused(alice: ApiClient, zone: str) -> None:
    created = alice.post("/v1/jobs", job_body(timezone=zone))
    preview = alice.get("/v1/schedules/preview", schedule="0 9 * * *", timezone=zone)

    _assert_400(created, "timezone")
    _assert_400(preview, "timezone")
    assert _counts() == (0, 0)


def test_patch_cannot_store_fields_of_another_target_kind(alice: ApiClient) -> None:
    callable_id = alice.post("/v1/jobs", job_body(name="c")).json()["job_id"]
    http_id = alice.post("/v1/jobs", job_body(name="h", **_http(f"https://{PUBLIC}/x"))).json()[
        "job_id"
    ]

    url_on_callable = alice.patch(
        f"/v1/jobs/{callable_id}", {"target": {"url": "https://10.0.0.1/"}}
    )
    headers_on_callable = alice.patch(
        f"/v1/jobs/{callable_id}", {"target": {"headers": {"X-Token": "t"}}}
    )
    name_on_http = alice.patch(f"/v1/jobs/{http_id}", {"target": {"name": "demo.heartbeat"}})

    _assert_400(url_on_callable, "target.url")
    _assert_400(headers_on_callable, "target.headers")
    _assert_400(name_on_http, "target.name")
    stored = {job.name: job for job in Job.objects.all()}
    assert (stored["c"].version, stored["c"].target_url, stored["c"].target_headers) == (1, "", {})
    assert (stored["h"].version, stored["h"].target_name) == (1, "")


def test_create_cannot_mix_fields_of_two_target_kinds(alice: ApiClient) -> None:
    target = {"kind": "callable", "name": "demo.heartbeat", "url": f"https://{PUBLIC}/x"}

    response = alice.post("/v1/jobs", job_body(target=target))

    _assert_400(response, "target.url")
    assert _counts() == (0, 0)


def test_switching_kind_in_a_patch_still_works(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(
        f"/v1/jobs/{job_id}", {"target": {"kind": "http", "url": f"https://{PUBLIC}/x"}}
    )

    assert response.status_code == 200, response.json()
    job = Job.objects.get(id=job_id)
    assert (job.target_kind, job.target_name, job.target_url) == ("http", "", f"https://{PUBLIC}/x")


WRONG_TYPES: list[tuple[dict[str, Any], str]] = [
    ({"name": 123}, "name"),
    ({"name": 1.5}, "name"),
    ({"description": 7}, "description"),
    ({"schedule": 5}, "schedule"),
    ({"timezone": 0}, "timezone"),
    ({"queue": 9}, "queue"),
    ({"idempotency_key": 42}, "idempotency_key"),
    ({"target": {"kind": "callable", "name": 12}}, "target.name"),
    ({"target": {"kind": "http", "url": 12}}, "target.url"),
    (
        {"target": {"kind": "http", "url": f"https://{PUBLIC}/", "headers": {"X-A": 1}}},
        "target.headers.X-A",
    ),
    ({"priority": "5"}, "priority"),
    ({"priority": True}, "priority"),
    ({"timeout_sec": "30"}, "timeout_sec"),
    ({"retries": {"max_attempts": "3"}}, "retries.max_attempts"),
    ({"critical": "yes"}, "critical"),
    ({"critical": 1}, "critical"),
    ({"retries": {"jitter": "false"}}, "retries.jitter"),
]


@pytest.mark.parametrize(("overrides", "field"), WRONG_TYPES, ids=[f for _, f in WRONG_TYPES])
def test_values_of_the_wrong_json_type_are_refused(
    alice: ApiClient, overrides: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/jobs", job_body(**overrides))

    _assert_400(response, field)
    assert _counts() == (0, 0)


def test_wrong_types_in_a_patch_change_nothing(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    response = alice.patch(f"/v1/jobs/{job_id}", {"name": 123, "payload": {"v": 2}})

    _assert_400(response, "name")
    job = Job.objects.get(id=job_id)
    assert (job.version, job.name, job.payload) == (1, "nightly-report", {"report": "sales"})


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/v1/jobs", "status"),
        ("/v1/jobs", "name"),
        ("/v1/jobs", "cursor"),
        ("/v1/jobs", "limit"),
        ("/v1/dead-letters", "job_id"),
        ("/v1/dead-letters", "replayed"),
        ("/v1/schedules/preview?schedule=0+9+*+*+*", "timezone"),
        ("/v1/schedules/preview?schedule=0+9+*+*+*", "count"),
    ],
)
def test_empty_query_values_are_400_naming_the_parameter(
    alice: ApiClient, path: str, param: str
) -> None:
    separator = "&" if "?" in path else "?"

    response = alice.get(f"{path}{separator}{param}=")

    _assert_400(response, param)


def test_empty_query_value_on_the_runs_list_is_400(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    for param in ("state", "since", "until"):
        _assert_400(alice.get(f"/v1/jobs/{job_id}/runs?{param}="), param)


def test_repeated_query_parameter_is_400(alice: ApiClient) -> None:
    response = alice.get("/v1/jobs?status=active&status=paused")

    _assert_400(response, "status")


@pytest.mark.parametrize("path", ["/v1/no-such-thing", "/v1/jobs/not-a-uuid"])
def test_404_handler_follows_the_request_id_rule(alice: ApiClient, path: str) -> None:
    odd = "x" * 129
    echoed = alice.get(path, headers={"X-Request-ID": "trace-42"})
    replaced = alice.get(path, headers={"X-Request-ID": odd})
    injected = alice.get(path, headers={"X-Request-ID": "a<script>b"})

    assert echoed.status_code == replaced.status_code == injected.status_code == 404
    assert echoed.json()["request_id"] == "trace-42" == echoed["X-Request-ID"]
    for response in (replaced, injected):
        request_id = response.json()["request_id"]
        assert request_id == response["X-Request-ID"]
        assert len(request_id) == 32
        assert request_id.isalnum()
