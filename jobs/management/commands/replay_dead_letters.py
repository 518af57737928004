"""manage.py replay_dead_letters: run dead-lettered runs again as a new attempt."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.clock import SystemClock
from jobs.services.dead_letters import dead_letter_replay, dead_letter_select


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise CommandError(f"--job {value!r} is not a job id (UUID)") from None


def _instant(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--since {value!r} is not an ISO 8601 instant") from None
    if parsed.tzinfo is None:
        raise CommandError("--since must include a UTC offset, for example 2026-01-01T00:00Z")
    return parsed


class Command(BaseCommand):
    help = (
        "Replay dead letters (oldest first): each run waits as pending and runs as a new attempt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--job", help="only this job's dead letters (job id)")
        parser.add_argument("--tenant", help="only this tenant's dead letters (tenant name)")
        parser.add_argument("--since", help="only dead letters moved at or after this instant")
        parser.add_argument("--limit", type=int, help="replay at most this many")
        parser.add_argument("--dry-run", action="store_true", help="list them; change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        selected = list(
            dead_letter_select(
                job_id=_uuid(options["job"]) if options["job"] else None,
                tenant_name=options["tenant"],
                since=_instant(options["since"]) if options["since"] else None,
                limit=limit,
            )
        )
        total = len(selected)
        verb = "would replay" if options["dry_run"] else "replayed"
        replayed = 0
        for index, letter in enumerate(selected, start=1):
            if not options["dry_run"] and not dead_letter_replay(
                run_id=letter.run_id, now=SystemClock().now()
            ):
                self.stdout.write(f"[{index}/{total}] skipped run {letter.run_id}: no longer dead")
                continue
            replayed += 1
            self.stdout.write(
                f"[{index}/{total}] {verb} run {letter.run_id} (job {letter.job_id}, "
                f"{letter.attempts} attempt(s)): {letter.last_error[:120]}"
            )
        self.stdout.write(f"{verb} {replayed} of {total} dead letter(s)")
