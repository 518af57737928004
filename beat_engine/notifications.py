"""Change feed: job changes and node departures over Redis pub/sub, buffered for the engine."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field

import redis

from beat_engine.clock import Clock, SystemClock
from beat_engine.redis_leases import NODES_CHANNEL
from jobs.notify import CHANGES_CHANNEL

logger = logging.getLogger(__name__)


@dataclass
class Changes:
    jobs: dict[uuid.UUID, int] = field(default_factory=dict)  # job id -> partition
    nodes_changed: bool = False
    # Partitions with runs just made pending (a parent's outcome, jobs/services/dag_handoff.py):
    # their owner fires its timers now.
    timers: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.jobs) or self.nodes_changed or bool(self.timers)


class ChangeFeed:
    """Lost messages are tolerable (the engine reloads its horizon periodically), so a Redis
    error only drops the subscription until the next call re-creates it."""

    def __init__(self, client: redis.Redis[bytes], *, clock: Clock | None = None) -> None:
        self._client = client
        self._clock = clock or SystemClock()
        self._pubsub: redis.client.PubSub | None = None
        self._pending = Changes()

    def _subscribed(self) -> redis.client.PubSub:
        if self._pubsub is None:
            # Confirmations are read as messages and skipped in _add: with redis-py ignoring
            # them, get_message answers None for one, and drain() would stop there, leaving
            # the announcements behind it unread until the next tick.
            pubsub = self._client.pubsub()
            pubsub.subscribe(CHANGES_CHANNEL, NODES_CHANNEL)
            self._pubsub = pubsub
        return self._pubsub

    def _read(self, timeout_s: float) -> bool:
        try:
            message = self._subscribed().get_message(timeout=timeout_s)
        except redis.RedisError:
            logger.warning("beat.notifications.lost", exc_info=True)
            self.close()
            return False
        if message is None:
            return False
        self._add(message)
        return True

    def _add(self, message: dict[str, object]) -> None:
        if message.get("type") != "message":
            return  # a subscribe confirmation
        channel = message.get("channel")
        channel = channel.decode() if isinstance(channel, bytes) else channel
        if channel == NODES_CHANNEL:
            self._pending.nodes_changed = True
            return
        try:
            data = json.loads(message["data"])  # type: ignore[arg-type]
            if "timers" in data:
                self._pending.timers.update(int(p) for p in data["timers"])
                return
            self._pending.jobs[uuid.UUID(data["job_id"])] = int(data["partition"])
        except (ValueError, KeyError, TypeError):
            logger.warning("beat.notifications.malformed", extra={"data": repr(message)[:200]})

    def wait(self, timeout_s: float) -> None:
        """Block up to ``timeout_s`` for the first message; the engine's sleep.

        With Redis unreachable (a master failing over) the read fails at once; the rest of the
        timeout is slept, or the engine's loop would spin on failing ticks instead of pausing.
        """
        started = self._clock.monotonic()
        if not self._read(timeout_s) and self._pubsub is None:
            self._clock.sleep(max(0.0, timeout_s - (self._clock.monotonic() - started)))

    def membership_changed(self) -> bool:
        """Whether a node joined, left or handed partitions over since the last drain: the
        messages received so far are read (without blocking) and kept for the next drain.
        Called between claim batches: without a subscription (Redis unreachable) it reads
        nothing, leaving the reconnection to the tick's drain and sleep."""
        if self._pubsub is not None:
            while self._read(0.0):
                pass
        return self._pending.nodes_changed

    def drain(self) -> Changes:
        """Everything received so far, without blocking."""
        while self._read(0.0):
            pass
        changes, self._pending = self._pending, Changes()
        return changes

    def close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except redis.RedisError:
                logger.debug("beat.notifications.close_failed", exc_info=True)
            self._pubsub = None
