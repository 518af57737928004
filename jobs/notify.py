"""Change notifications over Redis pub/sub: job changes to the beat engine, cancels to workers."""

from __future__ import annotations

import json
import logging
from functools import lru_cache

import redis
from django.conf import settings
from django.db import transaction

from scheduler_project.redis_urls import redis_from_url

logger = logging.getLogger(__name__)

CHANGES_CHANNEL = "sched:changes"
# Ids of running runs whose cancel was just requested, for their workers (jobs/cancel_watch.py).
CANCELS_CHANNEL = "sched:cancels"


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:  # type: ignore[type-arg]
    return redis_from_url(settings.REDIS_URL, socket_timeout=5)


def _publish(message: str) -> None:
    try:
        redis_client().publish(CHANGES_CHANNEL, message)
    except redis.RedisError:
        # A lost notification only delays the change until the engine's next refresh of its
        # horizon; the claim re-reads the row, so nothing wrong can fire.
        logger.warning("notify.publish_failed", exc_info=True)


def notify_runs_cancelled(run_ids: list[str]) -> None:
    """Wake the supervisors of these running runs once the cancel commits (jobs/cancel_watch.py).

    A lost message only delays the stop to the run's next heartbeat, which reads the flag.
    """
    if not run_ids:
        return
    message = json.dumps(run_ids)

    def publish() -> None:
        try:
            redis_client().publish(CANCELS_CHANNEL, message)
        except redis.RedisError:
            logger.warning("notify.cancel_publish_failed", exc_info=True)

    transaction.on_commit(publish)


def notify_job_changed(*, job_id: str, partition: int) -> None:
    """Tell the owner of ``partition`` to reload the job, once the transaction commits."""
    message = json.dumps({"job_id": job_id, "partition": partition})
    transaction.on_commit(lambda: _publish(message))


def notify_timers_due(partitions: list[int]) -> None:
    """Once the transaction commits, tell the owners of ``partitions`` to fire their timers now:
    runs there were just made pending and due (a parent's outcome handed off to its children,
    a replay, a manual trigger), so they are queued this tick instead of at the next timer poll.

    A lost message only delays them to that poll (timer_poll_s, 0.5 s): the runs are rows.
    """
    if not partitions:
        return
    message = json.dumps({"timers": sorted(set(partitions))})
    transaction.on_commit(lambda: _publish(message))
