"""Create a tenant (a team that owns jobs)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from jobs.errors import InvalidInput
from jobs.services.tenants import tenant_create


class Command(BaseCommand):
    help = "Create a tenant; API keys for it come from create_api_key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="unique tenant name, e.g. payments")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = tenant_create(name=options["name"], now=SystemClock().now())
        except InvalidInput as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        self.stdout.write(f"created tenant {tenant.name} (id {tenant.pk})")
