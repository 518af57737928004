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

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


def session_settings_sql(idle_tx_timeout_s: float) -> str:
    # A plain SET (no bound parameter: SET takes none), from a float the settings validated.
    return f"SET idle_in_transaction_session_timeout = {max(1, round(idle_tx_timeout_s * 1000))}"


def install_session_limits(idle_tx_timeout_s: float) -> None:
    """Apply the limits to every connection this process opens from now on, on any thread,
    and to the current thread's connection if it is already open."""
    sql = session_settings_sql(idle_tx_timeout_s)

    def on_connect(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(sql)

    connection_created.connect(on_connect, weak=False, dispatch_uid="beat_engine.db_session")
    from django.db import connection

    if connection.connection is not None:
        on_connect(None, connection)
