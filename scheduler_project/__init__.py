"""Django project for the scheduler: settings, URLs and the Celery app."""

from scheduler_project.celery import app as celery_app

__all__ = ["celery_app"]
