"""Cancel requests reach a running attempt at once: a hint over Redis pub/sub, per process.

A cancel commits ``cancel_requested`` on the run and then publishes the run's id on
``CANCELS_CHANNEL`` (jobs/notify.py). In each worker process a listener thread, started with
the first supervised run, wakes the supervisor of that run, which heartbeats at once: the
heartbeat reads the flag from PostgreSQL, so the database still decides and a stray message
can cost one extra heartbeat, never a cancel. A lost message (Redis down, a listener
reconnecting) only delays the stop to the next regular heartbeat (Redis is a hint,
docs/architecture.md, Invariants).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from django.conf import settings

from beat_engine.clock import SystemClock
from jobs.notify import CANCELS_CHANNEL
from scheduler_project.redis_urls import redis_from_url

logger = logging.getLogger(__name__)
# How long the listener waits on a quiet channel before looking again, and after a broken
# connection before reconnecting.
_POLL_S = 30.0
_RECONNECT_S = 1.0
# The first run in a process waits this long at most for the subscription, so that a cancel
# announced just after it started is not missed (a Redis outage costs this once per process).
_READY_S = 2.0


class CancelWatch:
    """Run id -> the event its supervisor waits on; one listener thread feeds them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[threading.Event]] = {}
        self._listener: threading.Thread | None = None
        self._subscribed = threading.Event()

    @contextmanager
    def watching(self, run_id: uuid.UUID, wake: threading.Event) -> Iterator[None]:
        """Set ``wake`` whenever a cancel of ``run_id`` is announced, while in this block."""
        key = str(run_id)
        first = False
        with self._lock:
            self._waiting.setdefault(key, []).append(wake)
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen, name="scheduler-cancel-watch", daemon=True
                )
                self._listener.start()
                first = True
        if first:
            self._subscribed.wait(_READY_S)
        try:
            yield
        finally:
            with self._lock:
                events = self._waiting.get(key, [])
                if wake in events:
                    events.remove(wake)
                if not events:
                    self._waiting.pop(key, None)

    def announced(self, run_ids: list[str]) -> int:
        """Wake the supervisors of ``run_ids`` in this process; how many were woken."""
        with self._lock:
            events = [event for key in run_ids for event in self._waiting.get(key, [])]
        for event in events:
            event.set()
        return len(events)

    def _listen(self) -> None:
        client = redis_from_url(settings.REDIS_URL, health_check_interval=_POLL_S)
        while True:
            try:
                with client.pubsub() as pubsub:
                    pubsub.subscribe(CANCELS_CHANNEL)
                    while True:
                        message = pubsub.get_message(timeout=_POLL_S)
                        if message is None:
                            continue
                        if message.get("type") == "subscribe":
                            # Confirmed by Redis: every cancel published from now on reaches us.
                            self._subscribed.set()
                        elif message.get("type") == "message":
                            self.announced(_run_ids(message.get("data")))
            except Exception:  # boundary of a daemon thread: log, wait, reconnect
                logger.warning("execution.cancel_watch.reconnecting", exc_info=True)
                SystemClock().sleep(_RECONNECT_S)


def _run_ids(data: object) -> list[str]:
    try:
        ids = json.loads(data) if isinstance(data, (bytes, str)) else []
    except ValueError:
        return []
    return [str(i) for i in ids] if isinstance(ids, list) else []


_watch = CancelWatch()


def _reset_after_fork() -> None:
    # The listener thread does not survive fork(); a pool process starts its own.
    global _watch
    _watch = CancelWatch()


os.register_at_fork(after_in_child=_reset_after_fork)


def watching(run_id: uuid.UUID, wake: threading.Event) -> AbstractContextManager[None]:
    """Set ``wake`` whenever a cancel of ``run_id`` is announced (this process's watch)."""
    return _watch.watching(run_id, wake)
