"""Messages rendered ahead of their push (on the engine's preparing thread) are pushed as
rendered, unless the partition's epoch changed meanwhile: then they are rendered again, so a
message never carries an epoch its sender no longer holds."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from beat_engine.config import EngineConfig
from beat_engine.publisher import Publisher, QueuedRun
from tests.support.beat_nodes import broker_messages

pytestmark = [pytest.mark.integration]


@pytest.fixture
def publisher(redis_client: redis.Redis) -> Publisher:
    config = EngineConfig.from_settings(node_id="n")
    return Publisher(redis.Redis.from_url(config.broker_url), origin="n")


def test_rendered_message_is_pushed_as_rendered(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    run = QueuedRun(uuid.uuid4(), 1, 7, "scheduler", 0)
    rendered = publisher.render([run], {7: 3})

    publisher.push([run], {7: 3}, rendered)

    (message,) = broker_messages(redis_client)
    assert message == json.loads(rendered[run.run_id][1])
    assert message["headers"]["sched_epoch"] == 3


def test_message_rendered_under_an_older_epoch_is_rendered_again(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    fresh = QueuedRun(uuid.uuid4(), 1, 7, "scheduler", 0)
    stale = QueuedRun(uuid.uuid4(), 1, 8, "scheduler", 9)
    rendered = publisher.render([fresh, stale], {7: 3, 8: 5})

    publisher.push([fresh, stale], {7: 3, 8: 6}, rendered)

    epochs = {m["headers"]["argsrepr"][2:38]: m["headers"]["sched_epoch"]
              for m in broker_messages(redis_client)}  # fmt: skip
    assert epochs == {str(fresh.run_id): 3, str(stale.run_id): 6}
