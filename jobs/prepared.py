"""The worker's per-run statements, bound and prepared on the server.

Django's psycopg backend binds parameters on the client (``ClientCursor``): every statement
reaches PostgreSQL as new text and is parsed and planned afresh. A worker sends the same two
statements for every run (the start and the outcome compare-and-sets), and their planning cost
more than their execution: a CTE of UPDATEs over a partitioned table (docs/scaling.md, "Where
one PostgreSQL primary tops out"). Sent through a server-binding cursor and prepared, each is
parsed once per connection. psycopg keeps the connection's prepared statements by text, so each
distinct statement (a success, a failure, with a dedup key or not) is prepared once.

Left to itself, PostgreSQL would still plan each of them afresh at every run: after five custom
plans it keeps the generic plan only when its estimated cost is no higher, and a generic plan
over the runs table's day partitions adds up every partition's estimate, so it never is. A
worker's connections therefore set ``plan_cache_mode = force_generic_plan``
(``install_generic_plans``): each statement is planned once per connection, and the run id, a
parameter, still prunes the runs and attempts to the run's own partition, at execution (the
plans say "Subplans Removed"). Only prepared statements (and PL/pgSQL's) have cached plans:
Django's own statements are sent as text and planned each time, as before.

Behind a transaction-pooling PgBouncer older than 1.21 a prepared statement does not survive
the hand-over between server connections: SCHEDULER_PREPARED_STATEMENTS=0 sets the connection's
``prepare_threshold`` to None (scheduler_project/settings.py), and psycopg then sends them
unprepared (still bound on the server).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery.signals import worker_init
from django.db import connection

from beat_engine.db_session import set_on_every_session
from beat_engine.fencing import server_cursor

GENERIC_PLANS_SQL = "SET plan_cache_mode = force_generic_plan"
GENERIC_PLANS_UID = "jobs.prepared.generic"


def install_generic_plans() -> None:
    """Every connection this process opens from now on (any thread) keeps the generic plans of
    its prepared statements; the current thread's, if open, too. Called as a worker starts
    (Celery's worker_init, below, before the prefork pool forks): the engine and the web
    prepare nothing of this kind and keep PostgreSQL's default. A session whose first
    transaction rolls back keeps the default, which costs planning, never a wrong result; a
    task thread opens its connection for the start, in autocommit."""
    set_on_every_session(GENERIC_PLANS_SQL, uid=GENERIC_PLANS_UID)


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


def _worker_init(**_kwargs: Any) -> None:
    install_generic_plans()


worker_init.connect(_worker_init, weak=False, dispatch_uid="jobs.prepared.worker_init")
