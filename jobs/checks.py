"""System checks for the scheduler's settings, ids jobs.E001 onwards."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register


@register()
def check_scheduler_settings(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine != "django.db.backends.postgresql":
        errors.append(
            Error(
                "The scheduler needs PostgreSQL (ON CONFLICT, partial indexes, row locks).",
                hint="Set DATABASE_URL to a postgresql:// URL.",
                id="jobs.E001",
            )
        )
    conf = settings.SCHEDULER
    if conf["LEASE_RENEW_S"] >= conf["LEASE_TTL_S"]:
        errors.append(
            Error(
                "SCHEDULER_LEASE_RENEW_S must be shorter than SCHEDULER_LEASE_TTL_S, or leases "
                "expire between renewals.",
                id="jobs.E002",
            )
        )
    if conf["HEARTBEAT_S"] >= conf["RUN_LEASE_S"]:
        errors.append(
            Error(
                "SCHEDULER_HEARTBEAT_S must be shorter than SCHEDULER_RUN_LEASE_S, or running "
                "attempts lose their lease while healthy.",
                id="jobs.E003",
            )
        )
    if settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 0) <= (
        settings.JOB_MAX_TIMEOUT_S
    ):
        errors.append(
            Error(
                "The broker visibility timeout must outlast the longest job timeout, or long "
                "runs are delivered twice.",
                id="jobs.E004",
            )
        )
    return errors


@register(Tags.security, deploy=True)
def check_secret_key_from_environment(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    if settings.SECRET_KEY == settings.DEV_SECRET_KEY:
        return [
            Error(
                "DJANGO_SECRET_KEY is not set: the development key is public.",
                hint="Set DJANGO_SECRET_KEY in the environment of every web, beat and worker.",
                id="jobs.E005",
            )
        ]
    return []


@register(Tags.database)
def check_partition_layout(
    app_configs: Any, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """`manage.py check --database default`: the jobs are in the layout SCHEDULER_PARTITIONS
    says (the beat engine refuses to start otherwise; beat_engine/layout.py)."""
    if not databases:
        return []
    from django.db import DatabaseError

    from beat_engine.layout import layout_problem

    try:
        problem = layout_problem(int(settings.SCHEDULER["PARTITIONS"]))
    except DatabaseError:
        return []  # not migrated yet, or unreachable: other checks and commands say so
    if problem is None:
        return []
    return [Error(problem, id="jobs.E006")]


@register(Tags.database)
def check_dag_handoff(app_configs: Any, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`manage.py check --database default`: the hand-off trigger this code relies on is the one
    installed (jobs/services/dag_handoff.py)."""
    if not databases:
        return []
    from django.db import DatabaseError

    from jobs.services.dag_handoff import handoff_problem

    try:
        if _jobs_migrations_pending():
            # The migration that ships a new hand-off installs it; `migrate` runs this check
            # before migrating and must not refuse the very migration that fixes it.
            return []
        problem = handoff_problem()
    except DatabaseError:
        return []  # not migrated yet, or unreachable: other checks and commands say so
    return [] if problem is None else [Error(problem, id="jobs.E007")]


def _jobs_migrations_pending() -> bool:
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connection, ignore_no_migrations=True)
    return any(node not in loader.applied_migrations for node in loader.graph.leaf_nodes("jobs"))
