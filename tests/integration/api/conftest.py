"""Fixtures for the API tests: a frozen clock every view reads, and a tenant's client."""

from __future__ import annotations

import pytest

from tests.support.api import ApiClient, api_client_for
from tests.support.clock import FakeClock
from tests.support.factories import T0


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch, redis_client: object) -> FakeClock:
    """Every view reads this clock (ApiView.clock), so tests decide what "now" is."""
    from jobs.api.base import ApiView

    fake = FakeClock(T0)
    monkeypatch.setattr(ApiView, "clock", fake)
    return fake


@pytest.fixture
def alice() -> ApiClient:
    return api_client_for("alice")
