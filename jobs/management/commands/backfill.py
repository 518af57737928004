"""Create the missing firings of a job over a past time range, as pending runs the engine fires."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from beat_engine.clock import Clock, SystemClock
from beat_engine.schedules import count_fires, iter_fires
from jobs.errors import InvalidTransition
from jobs.models import Job, RunTrigger
from jobs.run_ids import run_id_for
from jobs.services.dag_handoff import refuse_standalone_run
from jobs.services.dedup import dedup_key_for
from jobs.services.history_partitions import partitions_ensure_for
from jobs.services.jobs import schedule_spec
from jobs.states import RunState

# Without --force a backfill stops at this many firings: a typo in --start must not flood
# the queue with years of runs.
MAX_FIRINGS = 10_000
_CHUNK = 500
_EPSILON = timedelta(microseconds=1)

# ON CONFLICT DO NOTHING: firings that exist (however they got there) are left alone, so
# running the same backfill twice is harmless. No conflict target: the unique firing key is a
# unique index of each day partition (docs/history.md, "Partitions").
INSERT_SQL = f"""
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                         due_at, attempt, epoch, dedup_key, created_at, worker,
                         cancel_requested, last_error, replayed_count)
SELECT u.id, %s, %s, %s, u.scheduled_for, '{RunTrigger.BACKFILL.value}',
       '{RunState.PENDING.value}', %s, 0, 0, u.dedup_key, %s, '', false, '', 0
  FROM unnest(%s::uuid[], %s::timestamptz[], %s::text[]) AS u(id, scheduled_for, dedup_key)
ON CONFLICT DO NOTHING
"""

# Tests swap in a FakeClock; the command is an edge and reads the clock once per step.
clock: Clock = SystemClock()


def _instant(text: str, option: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{option} {text!r} is not an ISO 8601 instant") from None
    if value.utcoffset() is None:
        raise CommandError(f"{option} {text!r} needs a UTC offset, e.g. 2026-01-01T00:00Z")
    return value.astimezone(UTC)


def _rate(text: str) -> float:
    number = text.removesuffix("/s")
    try:
        rate = float(number)
    except ValueError:
        raise CommandError(f"--rate {text!r} is not a number of firings per second") from None
    if rate <= 0:
        raise CommandError("--rate must be positive")
    return rate


class Command(BaseCommand):
    help = "Create missing firings of JOB_ID between --start and --end (both inclusive)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job_id")
        parser.add_argument("--start", required=True, help="ISO 8601 instant with offset")
        parser.add_argument("--end", required=True, help="ISO 8601 instant with offset")
        parser.add_argument("--rate", default="100/s", help="most firings created per second")
        parser.add_argument("--dry-run", action="store_true", help="list, create nothing")
        parser.add_argument(
            "--force", action="store_true", help=f"allow more than {MAX_FIRINGS} firings"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job = self._job(options["job_id"])
        start, end = _instant(options["start"], "--start"), _instant(options["end"], "--end")
        rate = _rate(options["rate"])
        now = clock.now()
        if start > end:
            raise CommandError(f"--start {start.isoformat()} is after --end {end.isoformat()}")
        if end > now:
            raise CommandError(
                f"--end {end.isoformat()} is in the future; the engine fires future firings"
            )
        spec = schedule_spec(job)
        total = count_fires(spec, start - _EPSILON, end)
        if total > MAX_FIRINGS and not options["force"]:
            raise CommandError(
                f"the range holds {total} firings, more than {MAX_FIRINGS}; narrow it or --force"
            )
        fires = iter_fires(spec, start - _EPSILON, end)
        if options["dry_run"]:
            self._dry_run(job, list(fires))
            return
        # The days' partitions first (at most ON_DEMAND_MAX_DAYS; the rest go to the default).
        partitions_ensure_for(
            {fire.astimezone(UTC).date() for fire in iter_fires(spec, start - _EPSILON, end)}
        )
        created = self._create(job, fires, total, rate)
        self.stdout.write(f"created {created} of {total} firings ({total - created} existed)")

    def _job(self, text: str) -> Job:
        try:
            job = Job.objects.get(id=uuid.UUID(text))
        except (ValueError, Job.DoesNotExist):
            raise CommandError(f"no job with id {text!r}") from None
        # A root's backfill runs its whole DAG (the hand-off follows each root run); a dependent
        # job has no firings of its own to backfill.
        try:
            refuse_standalone_run(job, verb="backfill")
        except InvalidTransition as exc:
            raise CommandError(str(exc)) from None
        return job

    def _dry_run(self, job: Job, fires: list[datetime]) -> None:
        existing = set(
            job.runs.filter(scheduled_for__in=fires).values_list("scheduled_for", flat=True)
        )
        missing = [f for f in fires if f not in existing]
        for fire in missing:
            self.stdout.write(f"would create {fire.isoformat()}")
        self.stdout.write(f"{len(missing)} to create, {len(existing)} exist (dry run)")

    def _create(self, job: Job, fires: Any, total: int, rate: float) -> int:
        chunk_size = max(1, min(_CHUNK, int(rate)))
        started, done, created = clock.monotonic(), 0, 0
        chunk: list[datetime] = []
        for fire in [*fires, None]:
            if fire is not None:
                chunk.append(fire)
                if len(chunk) < chunk_size:
                    continue
            if not chunk:
                break
            created += self._insert(job, chunk)
            done += len(chunk)
            chunk = []
            self._progress(done, total)
            # Rate limit: never ahead of `rate` firings per second since the start.
            clock.sleep(started + done / rate - clock.monotonic())
        self.stderr.write("")
        return created

    def _insert(self, job: Job, chunk: list[datetime]) -> int:
        now = clock.now()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                INSERT_SQL,
                [job.id, job.tenant_id, job.partition, now, now,
                 [run_id_for(f) for f in chunk], chunk, [dedup_key_for(job.id, f) for f in chunk]],
            )  # fmt: skip
            return int(cursor.rowcount)

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        self.stderr.write(f"\r[{bar}] {done}/{total}", ending="")
        self.stderr.flush()
