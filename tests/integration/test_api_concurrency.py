"""Idempotent create under two truly concurrent identical requests: exactly one job."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from jobs.models import Job, Tenant
from jobs.services import job_intake
from tests.support.api import ApiClient, api_client_for, job_body


def _race(alice: ApiClient, body: dict[str, Any]) -> list[Any]:
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def create() -> None:
        # A client per thread: the test client keeps per-client state.
        client = ApiClient(tenant=alice.tenant, key=alice.key, client=Client())
        try:
            barrier.wait()
            results.append(client.post("/v1/jobs", body))
        finally:
            # Each thread has its own connection; close it so the test DB can be dropped.
            connection.close()

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_creates_make_one_job(redis_client: object) -> None:
    alice = api_client_for("alice")
    for round_no in range(5):
        body = job_body(name=f"race-{round_no}", idempotency_key=f"key-{round_no}")

        results = _race(alice, body)

        assert sorted(r.status_code for r in results) == [200, 201]
        assert len({r.json()["job_id"] for r in results}) == 1
        assert Job.objects.filter(idempotency_key=f"key-{round_no}").count() == 1


@pytest.mark.django_db(transaction=True)
def test_both_past_the_lookup_the_unique_constraint_decides(
    redis_client: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Force the worst interleaving: both requests miss the pre-check and both INSERT."""
    alice = api_client_for("alice")
    seen = threading.local()
    real_by_key = job_intake._by_key

    def by_key_missing_first(tenant: Tenant, key: str) -> Job | None:
        if not getattr(seen, "called", False):
            seen.called = True
            return None
        return real_by_key(tenant, key)

    monkeypatch.setattr(job_intake, "_by_key", by_key_missing_first)

    results = _race(alice, job_body(idempotency_key="the-key"))

    assert sorted(r.status_code for r in results) == [200, 201], [r.json() for r in results]
    assert len({r.json()["job_id"] for r in results}) == 1
    assert Job.objects.count() == 1
