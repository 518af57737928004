"""Archiving days of run history on real PostgreSQL (jobs/services/run_archive.py,
docs/history.md, "Archive"): detach, export, verify, drop; what a running job or a replay needs
keeps its day hot; a dry run changes nothing; a restore loads a day back once."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from prometheus_client import REGISTRY

from beat_engine.db_clock import read_database_clock
from jobs import archive_format as fmt
from jobs.models import ArchivedDay, DeadLetter, DedupKey, JobRun, RunAttempt
from jobs.models_archive import ArchiveStep
from jobs.run_ids import day_id_range
from jobs.run_partitions import ATTEMPT_TABLE, RUN_TABLE, default_partition_name, partition_name
from jobs.services import run_archive
from jobs.services.run_archive import ArchiveFailed, archive_days, hot_cutoff
from tests.support.factories import job_factory, run_factory
from tests.support.history_days import ago, day_lines, fill_day, table_exists

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def archive_dir(settings: object, tmp_path: Path) -> Path:
    root = tmp_path / "archive"
    settings.SCHEDULER = {**settings.SCHEDULER, "ARCHIVE_DIR": str(root)}  # type: ignore[attr-defined]
    return root


@pytest.fixture(autouse=True)
def _no_audit_tables() -> Iterator[None]:
    # Restored days live outside the tables the test database's flush empties.
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA IF EXISTS history_audit CASCADE")


@pytest.fixture
def now() -> datetime:
    return read_database_clock()


def _archive(now: datetime, **kwargs: object) -> run_archive.ArchiveReport:
    return archive_days(before=hot_cutoff(now), clock=read_database_clock, **kwargs)  # type: ignore[arg-type]


def _file_lines(directory: Path, table: str) -> list[str]:
    with gzip.open(directory / f"{table}.jsonl.gz", "rt", encoding="utf-8") as stream:
        return [line.rstrip("\n") for line in stream]


def test_old_days_are_exported_verified_and_dropped(now: datetime, archive_dir: Path) -> None:
    job = job_factory(now=now, critical=True)
    old, older, hot = ago(now, 40), ago(now, 41), ago(now, 2)
    for day, runs in ((old, 120), (older, 30), (hot, 5)):
        fill_day(job, day, runs)
    before = {day: day_lines(day) for day in (old, older)}
    run = JobRun.objects.filter(scheduled_for__date=old).order_by("scheduled_for").first()
    assert run is not None
    # A closed dead letter past its retention, and two keys: expired, and still within its TTL.
    DeadLetter.objects.create(
        run=run, job=job, tenant=job.tenant, attempts=1, last_error="x",
        moved_at=now - timedelta(days=39), replayed_at=now - timedelta(days=35), replay_count=1,
    )  # fmt: skip
    for key, expires in (("expired", now - timedelta(days=1)), ("live", now + timedelta(days=1))):
        DedupKey.objects.create(
            key=key, tenant=job.tenant, job=job, run=run,
            created_at=now - timedelta(days=40), expires_at=expires,
        )  # fmt: skip

    report = _archive(now)

    assert sorted(d.day for d in report.by("archived")) == [older, old]
    for day, runs in ((old, 120), (older, 30)):
        record = ArchivedDay.objects.get(day=day)
        assert record.step == ArchiveStep.ARCHIVED
        assert (record.runs, record.attempts) == (runs, runs)
        directory = Path(record.directory)
        assert directory == fmt.day_directory(archive_dir, day)
        manifest, sha = fmt.verify_archive(directory)
        assert sha == record.manifest_sha256
        assert manifest.entry(RUN_TABLE).rows == runs
        # Every row, exactly once, exactly as PostgreSQL rendered it before the archive.
        for table in (RUN_TABLE, ATTEMPT_TABLE):
            lines = _file_lines(directory, table)
            assert len(lines) == len(set(lines)) == runs
            assert set(lines) == before[day][table]
        for table in (RUN_TABLE, ATTEMPT_TABLE):
            assert not table_exists(partition_name(table, day))
        assert not table_exists(run_archive.dead_letter_table(day))
    assert JobRun.objects.filter(scheduled_for__date__in=[old, older]).count() == 0
    assert RunAttempt.objects.filter(run__job=job).count() == 5
    assert JobRun.objects.count() == 5  # the hot day is untouched
    # The dead letter went with its day; the expired key is gone, the other kept without a run.
    assert not DeadLetter.objects.exists()
    (letter,) = _file_lines(fmt.day_directory(archive_dir, old), "jobs_deadletter")
    assert json.loads(letter)["run_id"] == str(run.id)
    assert list(DedupKey.objects.values_list("key", "run_id")) == [("live", None)]
    # Readable without this project: types as the manifest states them.
    first = json.loads(_file_lines(fmt.day_directory(archive_dir, older), RUN_TABLE)[0])
    assert first["lateness"] == pytest.approx(0.001234)
    assert first["result"]["text"] == "line\nnext"
    assert first["last_error"].startswith('boom "x" \\ caf\u00e9')
    assert first["scheduled_for"].endswith("Z")

    again = _archive(now)
    assert again.days == []


def test_what_a_running_job_or_a_replay_needs_keeps_its_day_hot(now: datetime) -> None:
    job = job_factory(now=now)
    live, dead, failed, replayed = (ago(now, n) for n in (40, 41, 42, 43))
    for day in (live, dead, failed, replayed):
        fill_day(job, day, 3)

    def one(day: object) -> JobRun:
        return JobRun.objects.filter(scheduled_for__date=day).first()  # type: ignore[return-value]

    live_run = one(live)
    JobRun.objects.filter(id=live_run.id).update(state="retry_wait", due_at=now, finished_at=None)
    DedupKey.objects.create(
        key="needed", tenant=job.tenant, job=job, run=live_run,
        created_at=now - timedelta(days=40), expires_at=now - timedelta(days=30),
    )  # fmt: skip
    dead_run = one(dead)
    JobRun.objects.filter(id=dead_run.id).update(state="dead")
    DeadLetter.objects.create(
        run=dead_run, job=job, tenant=job.tenant, attempts=1, moved_at=now - timedelta(days=41)
    )
    JobRun.objects.filter(id=one(failed).id).update(
        state="failed", finished_at=now - timedelta(days=2)
    )
    replayed_run = one(replayed)
    DeadLetter.objects.create(
        run=replayed_run, job=job, tenant=job.tenant, attempts=1,
        moved_at=now - timedelta(days=43), replayed_at=now - timedelta(days=3), replay_count=1,
    )  # fmt: skip

    report = _archive(now)

    reasons = {d.day: d.reason for d in report.by("held")}
    assert reasons == {
        live: "a live run",
        dead: "an open or retained dead letter",
        failed: "a dead run, or a run that failed within the dead-letter retention",
        replayed: "an open or retained dead letter",
    }
    assert not report.by("archived")
    assert not ArchivedDay.objects.exists()
    assert JobRun.objects.count() == 12
    assert DedupKey.objects.filter(key="needed", run=live_run).exists()
    assert DeadLetter.objects.count() == 2


def test_a_dry_run_changes_nothing(now: datetime, archive_dir: Path) -> None:
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 7)
    out = StringIO()

    call_command("archive_runs", "--dry-run", stdout=out, stderr=StringIO())

    assert f"{day.isoformat()}: would archive (7 runs)" in out.getvalue()
    assert "nothing changed" in out.getvalue()
    assert table_exists(partition_name(RUN_TABLE, day))
    assert JobRun.objects.count() == 7
    assert not ArchivedDay.objects.exists()
    assert not archive_dir.exists()


def test_before_inside_the_hot_window_is_refused(now: datetime) -> None:
    with pytest.raises(CommandError, match="reaches into the hot window"):
        call_command("archive_runs", "--before", now.date().isoformat(), stdout=StringIO())
    with pytest.raises(CommandError, match="is not a date"):
        call_command("archive_runs", "--before", "yesterday", stdout=StringIO())


def test_a_day_whose_files_differ_from_its_tables_is_exported_again(now: datetime) -> None:
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 20)
    assert run_archive._detach(day, now, in_default=False) == ""
    record = ArchivedDay.objects.get(day=day)
    run_archive._export(record, now, run_archive.Progress())
    # A row lost on the way to the disk: the file and its manifest agree, the table does not.
    directory = Path(record.directory)
    lines = _file_lines(directory, RUN_TABLE)
    entries = [fmt.write_table(directory, RUN_TABLE, [x.encode() for x in lines[1:]])] + [
        e for e in fmt.read_manifest(directory)[0].files if e.table != RUN_TABLE
    ]
    manifest = fmt.Manifest(day, now, None, None, tuple(entries))
    ArchivedDay.objects.filter(day=day).update(
        manifest_sha256=fmt.write_manifest(directory, manifest)
    )

    with pytest.raises(ArchiveFailed, match="20 \\(digest"):
        _archive(now)

    record.refresh_from_db()
    assert record.step == ArchiveStep.DETACHED
    assert table_exists(record.run_table)
    _archive(now)
    record.refresh_from_db()
    assert record.step == ArchiveStep.ARCHIVED
    assert len(_file_lines(directory, RUN_TABLE)) == 20


def test_a_restore_loads_the_day_back_once(now: datetime, archive_dir: Path) -> None:
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 25)
    before = day_lines(day)
    _archive(now)
    directory = fmt.day_directory(archive_dir, day)
    out = StringIO()

    call_command("restore_runs", str(directory / "manifest.json"), stdout=out, stderr=StringIO())
    call_command("restore_runs", str(directory), stdout=out, stderr=StringIO())

    assert "restored" in out.getvalue()
    assert "already restored from this archive" in out.getvalue()
    restored = f"history_audit.jobs_jobrun_p{day:%Y%m%d}"
    with connection.cursor() as cursor:
        for schema, table in ((fmt.RUNS, RUN_TABLE), (fmt.ATTEMPTS, ATTEMPT_TABLE)):
            cursor.execute(
                f"SELECT {schema.line_sql()} FROM history_audit.{table}_p{day:%Y%m%d} AS t"
            )
            lines = [row[0] for row in cursor.fetchall()]
            assert len(lines) == 25
            assert set(lines) == before[table]
        cursor.execute(f"SELECT count(DISTINCT (job_id, scheduled_for)) FROM {restored}")
        assert cursor.fetchone()[0] == 25
    # The runs table is not touched: the day stays archived.
    assert JobRun.objects.count() == 0


def _audit_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'history_audit' ORDER BY 1"
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "jobs_runattempt.jsonl.gz").unlink(), "jobs_runattempt.jsonl.gz: missing"),
        (lambda d: (d / "manifest.json").unlink(), "no manifest"),
        (
            lambda d: (d / "jobs_jobrun.jsonl.gz").write_bytes(
                gzip.compress(gzip.decompress((d / "jobs_jobrun.jsonl.gz").read_bytes())[5:])
            ),
            "SHA-256",
        ),
    ],
    ids=["missing-file", "no-manifest", "tampered"],
)
def test_a_bad_archive_is_refused_and_nothing_changes(
    now: datetime, archive_dir: Path, damage: object, message: str
) -> None:
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 5)
    _archive(now)
    directory = fmt.day_directory(archive_dir, day)
    damage(directory)  # type: ignore[operator]

    with pytest.raises(CommandError, match=message):
        call_command("restore_runs", str(directory), stdout=StringIO(), stderr=StringIO())

    assert _audit_tables() == []
    with pytest.raises(CommandError, match="no such archive directory"):
        call_command("restore_runs", str(archive_dir / "nowhere"), stdout=StringIO())


def test_a_hot_run_keeps_answering_while_old_days_go(now: datetime) -> None:
    # The archive detaches whole days: a run of the hot window is read by id as before.
    job = job_factory(now=now)
    fill_day(job, ago(now, 40), 3)
    hot = run_factory(job, scheduled_for=now - timedelta(hours=1))
    _archive(now)
    assert JobRun.objects.get(id=hot.id).scheduled_for == hot.scheduled_for


def test_a_verified_day_whose_files_are_gone_is_exported_again(now: datetime) -> None:
    # As when partition 0 moved to a node that does not see the first one's archive directory.
    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 10)
    assert run_archive._detach(day, now, in_default=False) == ""
    record = ArchivedDay.objects.get(day=day)
    run_archive._export(record, now, run_archive.Progress())
    run_archive._verify(record, now, run_archive.Progress())
    assert record.step == ArchiveStep.VERIFIED
    for path in Path(record.directory).iterdir():
        path.unlink()

    with pytest.raises(ArchiveFailed, match="verified files are gone"):
        _archive(now)

    record.refresh_from_db()
    assert record.step == ArchiveStep.DETACHED
    assert table_exists(record.run_table)
    _archive(now)
    record.refresh_from_db()
    assert record.step == ArchiveStep.ARCHIVED
    assert fmt.verify_archive(Path(record.directory))[0].entry(RUN_TABLE).rows == 10


def test_the_admin_lists_archived_days_to_superusers_only(now: datetime) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    job = job_factory(now=now)
    day = ago(now, 40)
    fill_day(job, day, 3)
    _archive(now)
    url = reverse("admin:jobs_archivedday_changelist")
    root, staff = Client(), Client()
    root.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    staff.force_login(User.objects.create(username="staff", is_staff=True))

    page = root.get(url)

    assert page.status_code == 200
    assert day.isoformat() in page.content.decode() or f"{day:%b}" in page.content.decode()
    assert staff.get(url).status_code == 403


_COUNTED = [
    ("scheduler_history_archive_days_total", {"outcome": "archived"}),
    ("scheduler_history_archive_days_total/held", {"outcome": "held"}),
    ("scheduler_history_archived_rows_total", {"table": RUN_TABLE}),
]


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name.split("/")[0], labels) or 0.0


def _in_default(day: object) -> int:
    with connection.cursor() as cursor:
        low, high = day_id_range(day)  # type: ignore[arg-type]
        cursor.execute(
            f"SELECT count(*) FROM {default_partition_name(RUN_TABLE)} WHERE id >= %s AND id < %s",
            [low, high],
        )
        return int(cursor.fetchone()[0])


def test_old_days_in_the_default_partition_are_archived_too(
    now: datetime, archive_dir: Path
) -> None:
    job = job_factory(now=now)
    old, crashed, live, hot = ago(now, 45), ago(now, 46), ago(now, 47), ago(now, 3)
    for day, runs in ((old, 40), (crashed, 10), (live, 5), (hot, 5)):
        fill_day(job, day, runs, in_default=True)
    # Inside the live day at any time of day the test runs (now's time plus an hour crossed
    # midnight after 23:00 UTC, into the crashed day), between two of fill_day's runs.
    run_factory(job, scheduled_for=datetime.combine(live, time(13, tzinfo=UTC)))
    before = {day: day_lines(day, in_default=True) for day in (old, crashed)}
    # A pass that died right after moving a day's rows out: the next one goes on from there.
    assert run_archive._detach(crashed, now, in_default=True) == ""
    assert _in_default(crashed) == 0
    counted = {name: _sample(name, labels) for name, labels in _COUNTED}

    report = _archive(now)

    assert sorted(d.day for d in report.by("archived")) == [crashed, old]
    assert [(d.day, d.reason) for d in report.by("held")] == [(live, "a live run")]
    for day, runs in ((old, 40), (crashed, 10)):
        record = ArchivedDay.objects.get(day=day)
        assert (record.step, record.runs, record.attempts) == (ArchiveStep.ARCHIVED, runs, runs)
        for table in (RUN_TABLE, ATTEMPT_TABLE):
            lines = _file_lines(Path(record.directory), table)
            assert len(lines) == len(set(lines)) == runs
            assert set(lines) == before[day][table]
            assert not table_exists(partition_name(table, day))
        assert _in_default(day) == 0
    assert _in_default(live) == 6
    assert _in_default(hot) == 5
    grown = {name: _sample(name, labels) - counted[name] for name, labels in _COUNTED}
    assert grown == {
        "scheduler_history_archive_days_total": 2,
        "scheduler_history_archive_days_total/held": 1,
        "scheduler_history_archived_rows_total": 50,
    }
    assert _archive(now).days == [
        run_archive.DayOutcome(live, "held", "a live run"),
    ]
    # A later write to an archived day keeps it hot; its archive keeps what was archived.
    fill_day(job, old, 1, in_default=True)
    held = {(d.day, d.reason) for d in _archive(now).by("held")}
    assert (old, "already archived; a later write created it again") in held
