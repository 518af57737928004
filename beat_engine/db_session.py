"""Session limits on a beat node's own PostgreSQL connections (docs/engine.md, "A frozen node").

A claim or timer transaction starts with the fence, which locks its partitions' epoch rows
until commit (beat_engine/fencing.py). A node frozen in the middle of one (SIGSTOP, a paused
VM, a process stuck in swap) keeps those locks for as long as it is frozen, and the node that
takes its partitions over waits on them to take its epochs. PostgreSQL's own
``idle_in_transaction_session_timeout`` ends such a session: the frozen transaction is rolled
back (never committed late), its locks go, and the frozen node, once it runs again, finds its
connection closed and carries on through a new one like after any database outage.
"""

from __future__ import annotations

import weakref
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


def session_settings_sql(idle_tx_timeout_s: float) -> str:
    # A plain SET (no bound parameter: SET takes none), from a float the settings validated.
    return f"SET idle_in_transaction_session_timeout = {max(1, round(idle_tx_timeout_s * 1000))}"


def install_session_limits(idle_tx_timeout_s: float) -> None:
    """Apply the limits to every connection this process opens from now on, on any thread,
    and to the current thread's connection if it is already open."""
    set_on_every_session(session_settings_sql(idle_tx_timeout_s), uid="beat_engine.db_session")


def set_on_every_session(sql: str, *, uid: str) -> None:
    """Run the SET ``sql`` on every PostgreSQL session this process opens from now on, on any
    thread, and on the current thread's if it is open; once per server session.

    Django announces a connection each time it hands one out, and a pool (the gevent worker's)
    hands the same session out again for every task; the setting stays with the session, so
    the sessions already set are remembered (psycopg's connections, weakly). A SET is undone
    with a transaction that rolls back: a session first opened inside one keeps the default."""
    done: weakref.WeakSet[Any] = weakref.WeakSet()

    def on_connect(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        raw = connection.connection
        if connection.vendor != "postgresql" or raw is None or raw in done:
            return
        with connection.cursor() as cursor:
            cursor.execute(sql)
        done.add(raw)

    connection_created.connect(on_connect, weak=False, dispatch_uid=uid)
    from django.db import connection

    if connection.connection is not None:
        on_connect(None, connection)
