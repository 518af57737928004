"""Print the next fire instants of a cron expression in a timezone."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from beat_engine.schedules import (
    ScheduleError,
    ScheduleKind,
    ScheduleSpec,
    parse_timezone,
    preview_fires,
)

MAX_COUNT = 1000


class Command(BaseCommand):
    help = "Print the next N fire instants of EXPR in ZONE, one ISO 8601 instant per line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("expression", help='cron expression, e.g. "0 9 * * 1-5" or @daily')
        parser.add_argument("--tz", default="UTC", help="IANA timezone, e.g. Europe/Paris")
        parser.add_argument("--after", help="ISO 8601 instant with offset (default: now)")
        parser.add_argument("--count", type=int, default=10)

    def handle(self, *args: Any, **options: Any) -> None:
        count = options["count"]
        if not 1 <= count <= MAX_COUNT:
            raise CommandError(f"--count must be between 1 and {MAX_COUNT}")
        try:
            zone = parse_timezone(options["tz"])
            after = self._after(options["after"])
            spec = ScheduleSpec(
                kind=ScheduleKind.CRON, cron=options["expression"], timezone=options["tz"]
            )
            spec.validate(now=after)
        except ScheduleError as exc:
            raise CommandError(f"{exc.field}: {exc}") from None
        for instant in preview_fires(spec, after, count):
            self.stdout.write(instant.astimezone(zone).isoformat())

    def _after(self, raw: str | None) -> datetime:
        if raw is None:
            return SystemClock().now()
        try:
            after = datetime.fromisoformat(raw)
        except ValueError:
            raise CommandError(f"--after {raw!r} is not an ISO 8601 instant") from None
        if after.tzinfo is None:
            raise CommandError("--after needs a UTC offset, e.g. 2026-03-29T00:00:00+00:00")
        return after
