"""gunicorn settings for the web (``gunicorn -c python:scheduler_project.gunicorn_conf``).

Its workers fork, so /metrics runs in prometheus_client's multiprocess mode when
PROMETHEUS_MULTIPROC_DIR is set (jobs/metrics.py): the arbiter empties the directory at start
and marks each exiting worker dead.
"""

from __future__ import annotations

from typing import Any

from jobs.metrics import clear_multiprocess_dir, process_exited


def on_starting(server: Any) -> None:
    clear_multiprocess_dir()


def child_exit(server: Any, worker: Any) -> None:
    process_exited(worker.pid)
