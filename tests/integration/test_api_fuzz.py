"""Schema-based fuzz of /v1 with schemathesis: no 500s, no response outside the schema.

Runs in-process against the WSGI app (no network), with a bounded, deterministic number of
examples per operation, so CI time stays predictable.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from jobs.models import Tenant
from jobs.services.tenants import api_key_create, tenant_create
from scheduler_project.wsgi import application
from tests.support.factories import T0, job_factory, run_factory
from tests.support.resolver import ResolverStub

EXAMPLES_PER_OPERATION = 40
_cases = itertools.count()

schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", application)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=EXAMPLES_PER_OPERATION,
    deterministic=True,
    database="none",
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def keep_test_connection() -> Iterator[None]:
    # A WSGI request ends by closing "old" DB connections, which would close the test's own
    # transaction; Django's test Client disconnects the same handler for the same reason.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def api_key(redis_client: object, keep_test_connection: None, fake_dns: ResolverStub) -> str:
    # Generated URLs name random hosts: each resolves to a public address, from the test
    # resolver instead of DNS, so the fuzz needs no network and literal IPs still meet the
    # SSRF checks.
    fake_dns.register_any("93.184.216.34")
    tenant = tenant_create(name="fuzz", now=T0)
    _, key = api_key_create(tenant=tenant, name="fuzz", now=T0)
    return key


@pytest.fixture
def existing(api_key: str) -> dict[str, str]:
    """A job of the fuzz tenant with a run, so item operations reach past the 404."""
    tenant = Tenant.objects.get(name="fuzz")
    job = job_factory(tenant, name="fuzz-job")
    run = run_factory(job, scheduled_for=T0 + timedelta(hours=1))
    return {"job_id": str(job.id), "run_id": str(run.id)}


@pytest.mark.django_db
@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_has_no_server_errors_and_keeps_its_schema(
    case: Any, api_key: str, existing: dict[str, str]
) -> None:
    # Random UUIDs would only ever meet 404; most cases aim at real objects instead.
    aim = next(_cases) % 4 != 0
    for name, value in existing.items():
        params = case.path_parameters or {}
        if name in params and aim:
            params[name] = value
    case.call_and_validate(headers={"Authorization": f"Bearer {api_key}"}, checks=CHECKS)
