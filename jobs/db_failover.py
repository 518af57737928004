"""Surviving a PostgreSQL failover: telling a lost primary from other errors, reconnecting, and
repeating a statement that is safe to repeat until a new primary answers.

Choosing the new primary is libpq's work, not this module's: DATABASE_URL lists every host with
``target_session_attrs=read-write`` (scheduler_project/env.py), so each new connection skips the
dead server and any standby and lands on whichever one was promoted. What is left to the
callers is to drop the connection that died with the old primary, and to try again for as long
as a promotion takes (SCHEDULER_DB_FAILOVER_WINDOW_S), waiting on the monotonic clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg
from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection

from beat_engine.clock import Clock, SystemClock
from jobs import metrics

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# SQLSTATEs a server sends as it goes away or while it cannot take writes: admin shutdown (a
# fast stop, or the old primary stopped by the failover tool), crash shutdown (another backend
# crashed), cannot connect now (starting up, or still in recovery), and a read-only transaction
# (the server was demoted to a standby under an open connection).
_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25006"})

# The first wait, doubled after each failure up to the cap: a promotion takes seconds, and a
# new primary should be found within a fraction of a second of it.
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` says the server behind the connection is gone or cannot take writes.

    Deadlocks, serialization failures, statement timeouts and constraint violations are not:
    the connection is fine and each has its own handling.
    """
    if isinstance(exc, InterfaceError | psycopg.InterfaceError):
        # "connection already closed": a previous statement found the server gone.
        return True
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(cause, psycopg.Error):
        return False
    if isinstance(cause, psycopg.InterfaceError):
        return True
    sqlstate = cause.sqlstate
    if sqlstate is None:
        # No SQLSTATE: libpq's own failure (the socket closed, no host accepted the connect).
        return isinstance(cause, psycopg.OperationalError)
    return sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES


def drop_connection() -> None:
    """Close this thread's connection, so the next statement connects again through libpq's
    host list. Closing a connection that is already broken cannot fail."""
    connection.close()


# What the web asks a client to wait while no primary answers (jobs/db_unavailable.py): a
# promotion by a failover tool takes a few seconds, and a longer wait would only add to the
# outage the client sees.
UNAVAILABLE_RETRY_AFTER_S = 2
UNAVAILABLE_MESSAGE = "the database is unavailable; retry later"


def web_request_unavailable() -> dict[str, str]:
    """A request found no primary: drop its connection, so the next request connects through
    libpq's host list; the headers of its 503."""
    drop_connection()
    metrics.DB_RECONNECTS.labels(site="web").inc()
    return {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)}


def failover_window_s() -> float:
    return float(settings.SCHEDULER["DB_FAILOVER_WINDOW_S"])


def backoff_s(failures: int) -> float:
    """The wait after the ``failures``-th consecutive lost connection (1-based)."""
    return float(min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** max(0, failures - 1)))


def retry_on_failover(
    call: Callable[P, R],
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """``call(*args, **kwargs)``, repeated while the connection is lost, for at most the
    failover window; then the last error is raised.

    Only for a call that is safe to repeat when the first try's outcome is unknown (the
    connection may have died after the server committed, before the client heard): a read, or
    a write that is a compare-and-set or keyed by a unique key, so a repeat of a committed write
    changes nothing. Never inside a transaction: its owner must start the whole one again.
    """
    return FailoverRetry().run(call, *args, **kwargs)


class FailoverRetry:
    """The retry loop of retry_on_failover, with its clock injectable for tests."""

    def __init__(self, *, clock: Clock | None = None, window_s: float | None = None) -> None:
        self._clock = clock or SystemClock()
        self._window_s = failover_window_s() if window_s is None else window_s

    def run(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        deadline = self._clock.monotonic() + self._window_s
        failures = 0
        while True:
            try:
                return call(*args, **kwargs)
            except DatabaseError as exc:
                if not connection_lost(exc) or connection.in_atomic_block:
                    raise
                failures += 1
                drop_connection()
                wait = backoff_s(failures)
                if self._clock.monotonic() + wait > deadline:
                    raise
                logger.warning(
                    "database.reconnecting",
                    extra={
                        "call": getattr(call, "__name__", repr(call)),
                        "failures": failures,
                        "error": str(exc).strip()[:200],
                    },
                )
                metrics.DB_RECONNECTS.labels(site="retry").inc()
                self._clock.sleep(wait)
