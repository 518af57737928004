"""manage.py restore_runs ARCHIVE: load an archived day back, for an audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.archive_format import MANIFEST, ArchiveError
from jobs.management.commands.archive_runs import Bar
from jobs.services.run_restore import restore_day


class Command(BaseCommand):
    help = (
        "Verify the archive of one day (its directory, or its manifest.json) and load it into "
        "tables of its own in the history_audit schema; nothing changes if it is bad."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("archive", help="an archived day's directory or its manifest.json")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["archive"])
        directory = path.parent if path.name == MANIFEST else path
        if not directory.is_dir():
            raise CommandError(f"{path}: no such archive directory; nothing changed")
        bar = Bar(self.stderr)
        try:
            report = restore_day(directory, progress=bar)
        except ArchiveError as exc:
            bar.end()
            raise CommandError(f"{exc}; nothing changed") from None
        bar.end()
        counts = ", ".join(f"{table} {rows}" for table, rows in report.tables.items())
        if report.already:
            self.stdout.write(f"{report.day} is already restored from this archive ({counts})")
            return
        self.stdout.write(
            f"restored {report.day} into history_audit ({counts} rows), e.g. "
            f"SELECT * FROM history_audit.jobs_jobrun_p{report.day.replace('-', '')}"
        )
