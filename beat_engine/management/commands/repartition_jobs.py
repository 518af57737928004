"""Move every job and its runs to a new partition count, with the beat engines stopped."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.layout import LayoutMismatch, jobs_repartition
from beat_engine.redis_leases import RedisLeaseStore
from jobs.models import Job
from scheduler_project.redis_urls import redis_from_url


class Command(BaseCommand):
    help = (
        "Re-partition every job (and its runs) for --partitions N and record that layout, so "
        "that beat engines with SCHEDULER_PARTITIONS=N start. Stop every engine first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--partitions", type=int, required=True, help="the new count")
        parser.add_argument(
            "--batch", type=int, default=5000, help="jobs moved per transaction (5000)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        partitions, batch = options["partitions"], options["batch"]
        if not 1 <= partitions <= 32767:
            raise CommandError("--partitions must be between 1 and 32767")
        if batch < 1:
            raise CommandError("--batch must be positive")
        self._refuse_while_engines_run()
        total = Job.objects.count()
        try:
            done = jobs_repartition(
                partitions, batch=batch, progress=lambda seen: self._progress(seen, total)
            )
        except LayoutMismatch as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write("")
        self.stdout.write(
            f"{done.jobs_moved} of {done.jobs_seen} jobs and {done.runs_moved} runs moved; "
            f"the jobs are now spread over {partitions} partitions. Start the beat engines "
            f"with SCHEDULER_PARTITIONS={partitions}."
        )

    def _refuse_while_engines_run(self) -> None:
        client = redis_from_url(settings.REDIS_URL, socket_timeout=5)
        try:
            live = RedisLeaseStore(client).live_nodes()
        except redis.RedisError as exc:
            raise CommandError(
                f"cannot tell whether beat engines are running (Redis: {exc}); nothing changed"
            ) from None
        if live:
            raise CommandError(
                f"beat engines are running ({', '.join(live)}): stop every one first; "
                "nothing changed"
            )

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * min(done, total) // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        self.stderr.write(f"\r[{bar}] {done}/{total} jobs", ending="")
        self.stderr.flush()
