"""Fixtures the fault tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_project.embedded import RedisServer


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own, which it may flush, wipe, drop clients of or restart
    without touching the Redis the rest of the suite uses (and whose memory it alone uses)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
