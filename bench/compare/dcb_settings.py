"""Minimal Django settings for django-celery-beat's DatabaseScheduler in the benchmark."""

from __future__ import annotations

import os

from scheduler_project.env import database_from_url

SECRET_KEY = "bench-only-not-secret"
INSTALLED_APPS = ["django_celery_beat"]
DATABASES = {"default": database_from_url(os.environ["BENCH_DCB_DATABASE_URL"])}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
