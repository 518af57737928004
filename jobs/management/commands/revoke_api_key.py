"""Revoke an API key by its prefix (or the whole key)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from jobs.services.tenants import KEY_PREFIX, api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key, given its prefix or the full sk_... key; requests with it get 401."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key's prefix (as shown in the admin) or the full key")

    def handle(self, *args: Any, **options: Any) -> None:
        given: str = options["key"]
        prefix = given.removeprefix(KEY_PREFIX).partition("_")[0]
        if not api_key_revoke(prefix=prefix, now=SystemClock().now()):
            raise CommandError(f"no active key with prefix {prefix!r}")
        self.stdout.write(f"revoked key {prefix}")
