"""Shared fixtures: real PostgreSQL and Redis come from the environment (see scripts/test)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis as redis_lib
from django.conf import settings

from tests.support.flush import deleting_flush
from tests.support.resolver import ResolverStub


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


def _service_hosts() -> list[str]:
    # The configured PostgreSQL and Redis hosts belong to the test environment (loopback, or a
    # CI service name); a Unix-socket path is not a host name and is left out.
    hosts = [str(settings.DATABASES["default"].get("HOST") or "")]
    for url in (settings.REDIS_URL, settings.CELERY_BROKER_URL):
        try:
            hosts.append(urlsplit(str(url)).hostname or "")
        except ValueError:
            continue
    return [host for host in hosts if host and not host.startswith("/")]


@pytest.fixture(scope="session", autouse=True)
def _deleting_flush() -> Iterator[None]:
    """Transactional tests end with a flush by DELETE while few rows are left
    (tests/support/flush.py): a TRUNCATE costs most of a second per test."""
    with deleting_flush():
        yield


@pytest.fixture(scope="session", autouse=True)
def resolver() -> Iterator[ResolverStub]:
    """For the whole session, no test resolves an external host name (tests/support/resolver.py)."""
    stub = ResolverStub(local_names=_service_hosts())
    uninstall = stub.install()
    yield stub
    uninstall()


@pytest.fixture(autouse=True)
def _no_external_lookups(resolver: ResolverStub) -> Iterator[None]:
    # The refused lookup raised an ordinary resolver error, which the code under test may have
    # turned into a 400 or swallowed; the test still fails, naming the host.
    resolver.take_refused()
    yield
    refused = resolver.take_refused()
    if refused:
        pytest.fail(f"the test tried to resolve external host names: {sorted(set(refused))}")


@pytest.fixture
def fake_dns(resolver: ResolverStub) -> Iterator[ResolverStub]:
    """Fake name -> address answers for one test: ``fake_dns.register(name, "93.184.216.34")``."""
    yield resolver
    resolver.forget_all()


@pytest.fixture(autouse=True)
def _engine_threads_stopped() -> Iterator[None]:
    """Engines a test made with make_engine get their helper threads stopped when it ends,
    before pytest-django flushes the database (its fixture was set up first, so it is torn
    down after this one): a webhook or preparer thread left running read and wrote during the
    next test's flush."""
    yield
    beat_nodes = sys.modules.get("tests.support.beat_nodes")
    if beat_nodes is not None:
        beat_nodes.close_engines_made()
