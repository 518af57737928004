"""The Celery app: configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery

from jobs.worker_metrics import install_worker_metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

app = Celery("scheduler_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install_worker_metrics(app)
