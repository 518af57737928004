"""What the threads and gevent worker pools need beyond prefork (docs/execution.md, "Worker
pools").

Django keeps one database connection per thread, and under gevent's monkey-patching per
greenlet. The prefork pool runs a task on its process's one thread, and the threads pool on a
thread it keeps, so the connection lives on for the next task (``CELERY_DB_REUSE_MAX``). The
gevent pool spawns a new greenlet for every task: a connection left open at its end would never
be used again, nor closed until garbage collection, and a busy worker ran PostgreSQL out of
connections ("too many clients") within seconds. So under gevent the connections come from a
pool of the process's (scheduler_project/settings.py, ``SCHEDULER_GEVENT_DB_POOL_MAX``) and a
task gives its connection back when it ends, and while its target runs.
"""

from __future__ import annotations

from django.db import connection

from scheduler_project.gevent_patch import under_gevent


def release_task_connection() -> None:
    """Under gevent, give the task's connection back to the pool (see the module docstring);
    under prefork and threads, keep it for the next statement and task on the same thread."""
    if under_gevent():
        connection.close()
