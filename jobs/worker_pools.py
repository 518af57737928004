"""What the threads and gevent worker pools need beyond prefork (docs/execution.md, "Worker
pools").

Django keeps one database connection per thread, and under gevent's monkey-patching per
greenlet. The prefork pool runs a task on its process's one thread, and the threads pool on a
thread it keeps, so the connection lives on for the next task (``CELERY_DB_REUSE_MAX``). The
gevent pool spawns a new greenlet for every task: a connection left open at its end would never
be used again, nor closed until garbage collection, and a busy worker ran PostgreSQL out of
connections ("too many clients") within seconds. Under gevent each task closes its own.
"""

from __future__ import annotations

import sys

from django.db import connection


def under_gevent() -> bool:
    """Whether this process runs with gevent's monkey-patching (``celery worker -P gevent``
    patches before anything else is imported)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


def release_task_connection() -> None:
    """At the end of a task: under gevent, close the task's connection (see the module
    docstring); under prefork and threads, keep it for the next task on the same thread."""
    if under_gevent():
        connection.close()
