"""Shared fixtures: real PostgreSQL and Redis come from the environment (see scripts/test)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis as redis_lib
from django.conf import settings


def _services_required() -> bool:
    # In CI a missing service is a failure, never a skip; locally one may opt in to skipping.
    return os.environ.get("CI") == "true" or os.environ.get("SCHEDULER_ALLOW_SKIP") != "1"


@pytest.fixture
def redis_client() -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis_lib.RedisError as exc:
        if _services_required():
            pytest.fail(f"Redis at {settings.REDIS_URL} is not reachable: {exc}")
        pytest.skip(f"Redis not reachable and SCHEDULER_ALLOW_SKIP=1: {exc}")
    client.flushdb()
    yield client
    client.close()
