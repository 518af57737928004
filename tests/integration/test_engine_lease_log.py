"""A node taking its partitions says so in one log line, however many partitions it takes."""

from __future__ import annotations

import logging

import pytest
import redis

from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_taking_every_partition_logs_one_line(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(FakeClock(T0), node_id="node-a")
    partitions = engine.config.partitions

    with caplog.at_level(logging.INFO, logger="beat_engine"):
        engine.ownership.maintain(engine.clock.monotonic())

    lease_lines = [r for r in caplog.records if r.getMessage().startswith("beat.lease.")]
    assert [r.getMessage() for r in lease_lines] == ["beat.lease.owned"]
    line = lease_lines[0].__dict__
    assert line["gained"] == list(range(partitions))
    assert line["owned"] == list(range(partitions))
    assert line["lost"] == []
