"""manage.py archive_runs: archive whole days of run history past the hot window."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from beat_engine.db_clock import read_database_clock
from jobs.services.run_archive import (
    ArchiveFailed,
    DayOutcome,
    Progress,
    archive_days,
    archive_root,
    hot_cutoff,
)


class Bar(Progress):
    """One line on stderr per step of a day: [#####.....] 2026-11-01 export 120000/240000."""

    def __init__(self, stream: OutputWrapper) -> None:
        self._stream = stream
        self._label = ""
        self._done = self._total = 0

    def step(self, day: date, step: str, total: int) -> None:
        self.end()
        self._label, self._done, self._total = f"{day.isoformat()} {step}", 0, total
        self._draw()

    def rows(self, n: int) -> None:
        self._done += n
        self._draw()

    def _draw(self) -> None:
        width = 30
        total = max(self._total, self._done, 1)
        filled = width * self._done // total if self._total else width
        bar = "#" * filled + "." * (width - filled)
        counted = f" {self._done}/{max(self._total, self._done)} rows" if self._total else ""
        self._stream.write(f"\r[{bar}] {self._label}{counted}", ending="")
        self._stream.flush()

    def end(self) -> None:
        if self._label:
            self._stream.write("")
            self._label = ""


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--before {text!r} is not a date (YYYY-MM-DD)") from None


class Command(BaseCommand):
    help = (
        "Archive every UTC day of run history older than SCHEDULER_HISTORY_HOT_DAYS (or before "
        "--before): detach its partitions, export them to SCHEDULER_ARCHIVE_DIR, verify, drop. "
        "Days a running job or a replay still needs stay hot and are listed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--before", help="archive days before this UTC date (YYYY-MM-DD); at most the default"
        )
        parser.add_argument("--dry-run", action="store_true", help="list the days; change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        now = read_database_clock()
        cutoff = hot_cutoff(now)
        before = _day(options["before"]) if options["before"] else cutoff
        if before > cutoff:
            raise CommandError(
                f"--before {before.isoformat()} reaches into the hot window: with "
                f"SCHEDULER_HISTORY_HOT_DAYS={settings.SCHEDULER['HISTORY_HOT_DAYS']} the latest "
                f"is {cutoff.isoformat()}; nothing changed"
            )
        bar = Bar(self.stderr)
        dry_run = options["dry_run"]
        try:
            report = archive_days(
                before=before,
                clock=read_database_clock,
                dry_run=dry_run,
                progress=None if dry_run else bar,
                on_day=lambda outcome: self._day(bar, outcome),
            )
        except ArchiveFailed as exc:
            bar.end()
            raise CommandError(f"{exc}; the next run goes on from the recorded step") from None
        bar.end()
        if report.locked_out:
            raise CommandError("another archive is running (its lock is held); nothing changed")
        archived, held, busy = report.by("archived"), report.by("held"), report.by("busy")
        if dry_run:
            would = report.by("would_archive")
            self.stdout.write(
                f"would archive {len(would)} day(s) before {before.isoformat()} to "
                f"{archive_root()}; {len(held)} kept hot (dry run, nothing changed)"
            )
            return
        self.stdout.write(
            f"archived {len(archived)} day(s) ({sum(d.runs for d in archived)} runs, "
            f"{sum(d.attempts for d in archived)} attempts) before {before.isoformat()} to "
            f"{archive_root()}; {len(held)} kept hot, {len(busy)} busy (tried again next run)"
        )

    def _day(self, bar: Bar, outcome: DayOutcome) -> None:
        bar.end()
        day = outcome.day.isoformat()
        if outcome.outcome == "archived":
            steps = ", ".join(f"{step} {s:.2f} s" for step, s in outcome.seconds.items())
            self.stdout.write(
                f"{day}: archived {outcome.runs} runs, {outcome.attempts} attempts ({steps})"
            )
        elif outcome.outcome == "would_archive":
            detail = outcome.reason or f"{outcome.runs} runs"
            self.stdout.write(f"{day}: would archive ({detail})")
        else:
            self.stdout.write(f"{day}: kept hot: {outcome.reason}")
        self.stdout.flush()
