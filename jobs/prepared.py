"""The worker's per-run statements, bound and prepared on the server.

Django's psycopg backend binds parameters on the client (``ClientCursor``): every statement
reaches PostgreSQL as new text and is parsed and planned afresh. A worker sends the same two
statements for every run (the start and the outcome compare-and-sets), and their planning cost
more than their execution: a CTE of UPDATEs over a partitioned table (docs/scaling.md, "Where
one PostgreSQL primary tops out"). Sent through a server-binding cursor and prepared, each is
parsed once per connection, and PostgreSQL plans it afresh for its first five runs and then,
when the generic plan costs no more, once for good (the run id still prunes to one partition,
at execution). psycopg keeps the connection's prepared statements by text, so each distinct
statement (a success, a failure, with a dedup key or not) is prepared once.

Behind a transaction-pooling PgBouncer older than 1.21 a prepared statement does not survive
the hand-over between server connections: SCHEDULER_PREPARED_STATEMENTS=0 sets the connection's
``prepare_threshold`` to None (scheduler_project/settings.py), and psycopg then sends them
unprepared (still bound on the server).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import connection

from beat_engine.fencing import server_cursor


def fetch_one(sql: str, params: Mapping[str, Any]) -> Sequence[Any] | None:
    """The first row of ``sql`` run with ``params`` (``%(name)s`` placeholders), prepared.

    As a Django cursor runs a statement: after the connection's health check (CONN_HEALTH_CHECKS),
    through the connection's execute wrappers, and raising Django's errors
    (``django.db.OperationalError`` and the rest), so the failover and retry paths see them
    alike."""
    connection.close_if_health_check_failed()
    executor: Callable[..., Sequence[Any] | None] = _prepared_fetch_one
    for wrapper in reversed(connection.execute_wrappers):
        executor = functools.partial(wrapper, executor)
    with connection.wrap_database_errors:
        return executor(sql, params, False, {"connection": connection, "cursor": None})


def _prepared_fetch_one(
    sql: str, params: Mapping[str, Any], many: bool, context: dict[str, Any]
) -> Sequence[Any] | None:
    with server_cursor() as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()
