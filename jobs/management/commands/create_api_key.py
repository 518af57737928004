"""Create an API key for a tenant and print it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from jobs.models import Tenant
from jobs.services.tenants import api_key_create


class Command(BaseCommand):
    help = "Create an API key for TENANT; the key is printed once and stored only as a hash."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="tenant name")
        parser.add_argument("--name", default="default", help="label for the key, e.g. ci")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"], is_active=True).first()
        if tenant is None:
            raise CommandError(f"no active tenant named {options['tenant']!r}")
        key, plaintext = api_key_create(
            tenant=tenant, name=options["name"], now=SystemClock().now()
        )
        self.stderr.write(
            f"key {key.prefix} for {tenant.name}; store it now, it is not shown again:"
        )
        # The key alone on stdout, so scripts can capture it.
        self.stdout.write(plaintext)
