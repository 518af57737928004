"""The beat node's notification duties, on a thread of their own: delivering webhooks, and the
sustained-lateness check.

Deliveries are HTTP calls to tenants' receivers, which may be slow or hang up to the timeout;
the lateness check reads every tenant's runs of the last window (about a second of database
time for 300,000 runs, measured). Both run on one thread and connection of their own, woken by
the tick, so the tick never waits for a receiver or for the check, and lease renewal and
claims never wait behind them. The rows are the record: a node that
dies mid-send leaves its claimed rows to another node once the claim expires, and a wake-up
lost here only delays a delivery to the next one.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from django.db import DatabaseError, connection

from beat_engine.clock import Clock
from jobs.services.lateness_alerts import lateness_check
from jobs.services.notifications import deliver_due, deliveries_due

logger = logging.getLogger("beat_engine")


class WebhookSender:
    def __init__(self, *, clock: Clock, node_id: str, batch: int = 20) -> None:
        self._clock = clock
        self._node_id = node_id
        self._batch = batch
        self._wake = threading.Event()
        self._check_lateness = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    def poll(self) -> None:
        """On the tick's thread: one probe of the pending-delivery index, and a wake-up of the
        delivery thread only when something is due, so an idle node keeps no thread and no
        connection busy."""
        if deliveries_due(now=self._clock.now()):
            self.wake()

    def request_lateness_check(self) -> None:
        self._check_lateness.set()
        self.wake()

    def wake(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="beat-webhooks", daemon=True)
            self._thread.start()
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once the thread has nothing left to send from its last wake-up (for tests and
        shutdown)."""
        return self._idle.wait(timeout_s)

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A daemon: one stuck in a receiver's timeout never keeps the process alive.
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            try:
                if self._check_lateness.is_set():
                    self._check_lateness.clear()
                    self._lateness()
                self._send_all()
            except Exception:
                # The thread's one broad except: whatever a duty raised (a connection closed
                # under it is an InterfaceError, not a DatabaseError), the thread lives on to
                # the next wake-up; the rows are the record and nothing is lost.
                logger.exception("beat.webhooks_thread_failed", extra={"node": self._node_id})
            finally:
                # Between wake-ups the thread holds no database connection.
                with contextlib.suppress(Exception):
                    connection.close()
            if not self._wake.is_set():
                self._idle.set()

    def _lateness(self) -> None:
        try:
            check_lateness(self._clock, self._node_id)
        except DatabaseError:
            logger.warning(
                "beat.lateness_check_failed", extra={"node": self._node_id}, exc_info=True
            )

    def _send_all(self) -> None:
        while not self._stop.is_set():
            try:
                taken = deliver_due(now=self._clock.now(), limit=self._batch)
            except DatabaseError:
                logger.warning("beat.webhooks_failed", extra={"node": self._node_id}, exc_info=True)
                return
            if taken < self._batch:
                return


def check_lateness(clock: Clock, node_id: str) -> int:
    """The periodic sustained-lateness check; returns the deliveries it recorded."""
    result = lateness_check(now=clock.now())
    if result.alerts:
        logger.warning(
            "beat.sustained_lateness",
            extra={"node": node_id, "tenants": result.alerts, "deliveries": result.deliveries},
        )
    return result.deliveries
