"""Set-up shared by the benchmarks that run Django in their own process on their own embedded
PostgreSQL and Redis (never DATABASE_URL's database): start the servers, set Django up, migrate,
and run bare SQL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def start(services_dir: Path, **environ: str) -> Any:
    """The started EmbeddedServices (stop them at the end); ``environ`` is set before Django."""
    from scheduler_project.embedded import EmbeddedServices

    for key in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(key, None)
    embedded = EmbeddedServices(services_dir)
    os.environ.update(embedded.start())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.update(environ)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    return embedded


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []
