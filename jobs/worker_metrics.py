"""A worker host's Prometheus exporter: a ``--metrics-port`` option of the worker command.

The worker's main process serves the metrics of all its prefork children, which write theirs to
PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode; jobs/metrics.py). The main
process empties that directory at start, before the pool forks, and a child that exits is
marked dead so its live gauges stop counting.
"""

from __future__ import annotations

import os
from typing import Any

import click
from celery import Celery, bootsteps, signals
from django.core.exceptions import ImproperlyConfigured

from jobs.metrics import (
    clear_multiprocess_dir,
    multiprocess_dir,
    process_exited,
    start_exporter,
)


class MetricsExporter(bootsteps.StartStopStep):
    """Starts the exporter in the worker's main process (not in its pool children)."""

    def __init__(self, parent: Any, metrics_port: int | None = None, **options: Any) -> None:
        super().__init__(parent, **options)
        self.port = metrics_port

    def start(self, parent: Any) -> None:
        from django.conf import settings

        port = self.port if self.port is not None else settings.SCHEDULER_WORKER_METRICS_PORT
        if not port:
            return
        if multiprocess_dir() is None and "prefork" in str(parent.pool_cls).lower():
            # The pool children would count in memory of their own, which no scrape reads: an
            # exporter that always says 0 is worse than none.
            raise ImproperlyConfigured(
                f"--metrics-port {port} with the prefork pool needs PROMETHEUS_MULTIPROC_DIR "
                "(a directory of this worker's own, docs/operations.md)"
            )
        start_exporter(port, settings.SCHEDULER_METRICS_ADDR)


def _worker_init(**_kwargs: Any) -> None:
    clear_multiprocess_dir()


def _process_shutdown(**_kwargs: Any) -> None:
    process_exited(os.getpid())


def install_worker_metrics(app: Celery) -> None:
    app.user_options["worker"].add(
        click.Option(
            ["--metrics-port"],
            type=int,
            default=None,
            help="Serve Prometheus metrics of this worker and its pool on this port "
            "(default SCHEDULER_WORKER_METRICS_PORT; 0: none).",
        )
    )
    app.steps["worker"].add(MetricsExporter)
    signals.worker_init.connect(_worker_init, weak=False)
    signals.worker_process_shutdown.connect(_process_shutdown, weak=False)
