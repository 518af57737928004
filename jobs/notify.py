"""Change notifications from the web to the beat engine over Redis pub/sub."""

from __future__ import annotations

import json
import logging
from functools import lru_cache

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

CHANGES_CHANNEL = "sched:changes"


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:  # type: ignore[type-arg]
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)


def _publish(message: str) -> None:
    try:
        redis_client().publish(CHANGES_CHANNEL, message)
    except redis.RedisError:
        # A lost notification only delays the change until the engine's next refresh of its
        # horizon; the claim re-reads the row, so nothing wrong can fire.
        logger.warning("notify.publish_failed", exc_info=True)


def notify_job_changed(*, job_id: str, partition: int) -> None:
    """Tell the owner of ``partition`` to reload the job, once the transaction commits."""
    message = json.dumps({"job_id": job_id, "partition": partition})
    transaction.on_commit(lambda: _publish(message))
