"""The Celery app: configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery

from jobs.worker_metrics import install_worker_metrics
from scheduler_project import broker_priority, broker_sentinel

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
# sentinel:// brokers: a failover's connection loss must not stop the worker (broker_sentinel.py).
broker_sentinel.install()
# redis:// brokers: a reserved share of each worker's pops for the lowest priority.
broker_priority.install()

app = Celery("scheduler_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install_worker_metrics(app)
