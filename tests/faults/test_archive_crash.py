"""A `manage.py archive_runs` killed with SIGKILL in the middle of a day's archive, after its
partitions were detached and before they were dropped: the next run finishes the day, and
every run and attempt is in the archive exactly once (docs/history.md, "Archive")."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.db_clock import read_database_clock
from jobs import archive_format as fmt
from jobs.models import ArchivedDay, JobRun
from jobs.models_archive import ArchiveStep
from jobs.run_partitions import ATTEMPT_TABLE, RUN_TABLE, partition_name
from tests.support.factories import job_factory
from tests.support.history_days import ago, day_lines, fill_day, table_exists
from tests.support.waiting import test_database_url

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# Enough rows that exporting and verifying them take far longer than the test's poll.
RUNS = 60_000
CLOCK = SystemClock()


@pytest.fixture
def archive_dir(settings: object, tmp_path: Path) -> Path:
    root = tmp_path / "archive"
    settings.SCHEDULER = {**settings.SCHEDULER, "ARCHIVE_DIR": str(root)}  # type: ignore[attr-defined]
    return root


def _start(archive_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, DATABASE_URL=test_database_url(), SCHEDULER_ARCHIVE_DIR=str(archive_dir))
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "archive_runs"],
            cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip


def _step(day: object) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT step FROM jobs_archivedday WHERE day = %s", [day])
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def _kill_at(process: subprocess.Popen[bytes], day: object, steps: set[str]) -> str:
    """SIGKILL the command as soon as the day's recorded step is one of ``steps``."""
    deadline = time.monotonic() + 300
    while (step := _step(day)) not in steps:
        assert process.poll() is None, f"the command ended first (step {step})"
        assert time.monotonic() < deadline, "the command never reached the step"
        CLOCK.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=20)
    connection.close()
    return step  # type: ignore[return-value]


def _rerun() -> str:
    # The killed command's session (and its archive lock) ends when PostgreSQL notices.
    deadline = time.monotonic() + 60
    while True:
        try:
            out = []
            call_command("archive_runs", stdout=_Lines(out), stderr=_Lines([]))
            return "".join(out)
        except Exception as exc:
            if "another archive is running" not in str(exc) or time.monotonic() > deadline:
                raise
            CLOCK.sleep(0.1)


class _Lines:
    def __init__(self, into: list[str]) -> None:
        self.into = into

    def write(self, text: str) -> None:
        self.into.append(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize(
    "kill_at",
    [{ArchiveStep.DETACHED.value}, {ArchiveStep.EXPORTED.value, ArchiveStep.VERIFIED.value}],
    ids=["while-exporting", "after-the-export"],
)
def test_a_killed_archive_is_finished_by_the_next_run_with_nothing_lost_or_twice(
    archive_dir: Path, tmp_path: Path, kill_at: set[str]
) -> None:
    now: datetime = read_database_clock()
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, RUNS)
    before = day_lines(day)
    process = _start(archive_dir, tmp_path / "archive.log")

    killed_at = _kill_at(process, day, kill_at)

    # Killed between the detach and the drop: the rows are out of the runs table, in the
    # detached tables, and the day's row says where the next run starts.
    assert killed_at in kill_at
    assert JobRun.objects.filter(job=job).count() == 0
    assert table_exists(partition_name(RUN_TABLE, day))
    output = _rerun()

    record = ArchivedDay.objects.get(day=day)
    assert record.step == ArchiveStep.ARCHIVED, output
    assert (record.runs, record.attempts) == (RUNS, RUNS)
    directory = Path(record.directory)
    fmt.verify_archive(directory)
    for table in (RUN_TABLE, ATTEMPT_TABLE):
        with gzip.open(directory / f"{table}.jsonl.gz", "rt", encoding="utf-8") as stream:
            lines = [line.rstrip("\n") for line in stream]
        assert len(lines) == RUNS
        assert set(lines) == before[table]
        assert not table_exists(partition_name(table, day))
    assert not list(directory.glob("*.partial"))
