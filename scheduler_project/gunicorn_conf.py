"""gunicorn settings for the web (``gunicorn -c python:scheduler_project.gunicorn_conf``).

Its workers fork, so /metrics runs in prometheus_client's multiprocess mode when
PROMETHEUS_MULTIPROC_DIR is set (jobs/metrics.py): the arbiter empties the directory at start
and marks each exiting worker dead.
"""

from __future__ import annotations

from typing import Any

from jobs.metrics import clear_multiprocess_dir, process_exited
from scheduler_project.env import env_choice


def on_starting(server: Any) -> None:
    clear_multiprocess_dir()


def child_exit(server: Any, worker: Any) -> None:
    process_exited(worker.pid)


# With SCHEDULER_LOG_FORMAT=text (scripts/run) gunicorn's own lines (arbiter, access log) take
# the text format too, so the web's output reads like every other process's. In production
# (json) gunicorn keeps its own logging configuration and flags, untouched.
if env_choice("SCHEDULER_LOG_FORMAT", "json", ("json", "text")) == "text":
    logconfig_dict: dict[str, Any] = {
        "loggers": {
            name: {"level": "INFO", "handlers": ["console"], "propagate": False}
            for name in ("gunicorn.error", "gunicorn.access")
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "text",
                "stream": "ext://sys.stderr",
            }
        },
        "formatters": {"text": {"()": "beat_engine.log_format.TextLineFormatter"}},
    }
