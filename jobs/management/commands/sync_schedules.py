"""manage.py sync_schedules: make a tenant's decorator jobs match the @scheduled declarations."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from jobs.decorators import declared_schedules
from jobs.errors import SchedulerError
from jobs.services.schedules_sync import schedules_sync


class Command(BaseCommand):
    help = (
        "Create, update, resume or pause the tenant's jobs declared with @scheduled in the "
        "modules of SCHEDULER_CLIENT_MODULES. Idempotent; removed declarations pause their job."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tenant",
            required=True,
            help="tenant that owns the declared jobs (created if missing)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        declarations = declared_schedules.all()
        self.stdout.write(f"{len(declarations)} schedule(s) declared in code")
        try:
            report = schedules_sync(
                tenant_name=options["tenant"], declarations=declarations, now=SystemClock().now()
            )
        except SchedulerError as exc:
            raise CommandError(str(exc)) from exc
        if report.tenant_created:
            self.stdout.write(f"created tenant {options['tenant']!r}")
        for label in ("created", "updated", "resumed", "paused", "unchanged"):
            for name in getattr(report, label):
                self.stdout.write(f"{label}: {name}")
        for name in report.conflicts:
            self.stderr.write(f"conflict: a job named {name!r} exists and was not declared in code")
        if report.conflicts:
            raise CommandError(f"{len(report.conflicts)} conflict(s); nothing else was skipped")
