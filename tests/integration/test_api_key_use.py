"""An API key's last_used_at is kept to the minute (docs/api.md, "Authentication"): a read
writes it only when it is that old, so requests within the minute cost no write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import ApiKey
from jobs.services.tenants import LAST_USED_RESOLUTION, api_key_authenticate, api_key_create
from tests.support.factories import T0, tenant_factory

pytestmark = pytest.mark.django_db


def _updates(action: Callable[[], object]) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert action() is not None
    return sum(q["sql"].startswith("UPDATE") for q in queries.captured_queries)


def test_last_used_at_is_written_once_a_minute() -> None:
    key, plaintext = api_key_create(tenant=tenant_factory(), name="ci", now=T0)
    second = timedelta(seconds=1)

    assert _updates(lambda: api_key_authenticate(plaintext=plaintext, now=T0)) == 1
    assert _updates(lambda: api_key_authenticate(plaintext=plaintext, now=T0 + 59 * second)) == 0
    assert ApiKey.objects.get(pk=key.pk).last_used_at == T0
    later = T0 + LAST_USED_RESOLUTION
    assert _updates(lambda: api_key_authenticate(plaintext=plaintext, now=later)) == 1
    assert ApiKey.objects.get(pk=key.pk).last_used_at == later
