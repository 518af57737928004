"""Archiving whole days of run history past the hot window, and loading one back for an audit
(docs/history.md, "Archive" and "Restore"; files: jobs/archive_format.py; partitions:
jobs/run_partitions.py).

A day goes through four steps, each recorded in its ArchivedDay row before the next starts,
so a crash at any point loses nothing and the next pass goes on from the recorded step:

1. **detach**: one transaction under the layout lock takes the runs table, then the attempts
   table (the order every run-then-attempt writer uses), checks again that nothing of the day
   is still needed, moves its closed dead letters to a table of their own, lets go of its
   dedup keys, detaches both partitions and writes the row (step ``detached``). Nothing is
   lost if it fails: it all rolls back;
2. **export**: the detached tables to files and a manifest, written under temporary names and
   renamed (step ``exported``); an export that dies half-way is simply done again;
3. **verify**: every file re-read (SHA-256, row count, row digest) and the count and digest
   compared with PostgreSQL's over the detached tables (step ``verified``); a mismatch sends
   the day back to ``detached`` (the next pass exports it again) and stops the pass;
4. **drop**: the detached tables dropped, under the layout lock (step ``archived``).

What keeps a day hot (it is skipped, said so, and tried again on the next pass): a live run
(pending, queued, running, retry_wait), a dead run, a run that failed less than the
dead-letter retention ago, or a dead letter that is open or closed less than that retention
ago: what a running job or a replay still needs (jobs/services/history_retention.py). The
dedup keys of an archived day's runs are all unprotected by then: the expired ones are
deleted, the others kept for the rest of their TTL with no run (a key's meaning does not
depend on its run, docs/history.md, "Dedup keys").

One archive runs at a time: a pass holds a session advisory lock, and every step is a
compare-and-set on the day's step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection, transaction

from jobs import archive_format as fmt
from jobs.archive_format import ArchiveError
from jobs.metrics import HISTORY_ARCHIVE_DAYS, HISTORY_ARCHIVED_ROWS
from jobs.models_archive import ArchivedDay, ArchiveStep
from jobs.run_ids import day_id_range, day_start
from jobs.run_partitions import (
    ATTEMPT_TABLE,
    LAYOUT_LOCK_KEY,
    RUN_TABLE,
    default_partition_name,
    parse_partition_name,
    partition_name,
)
from jobs.services.history_retention import dead_letter_retention
from jobs.states import RunState

logger = logging.getLogger("jobs")

# The key of the session advisory lock one archive pass holds ("HISTARCH").
ARCHIVE_LOCK_KEY = 0x4849535441524348
# How long the detach and the drop wait for their table locks before leaving the day for the
# next pass: the detach locks the runs table exclusively, and claims queue behind a waiting
# exclusive lock.
LOCK_TIMEOUT_MS = 2000
# Rows per progress report while exporting or verifying.
PROGRESS_EVERY = 50_000
# The first day a run in the default partition is archived from (see default_days).
FIRST_ARCHIVED_DAY = date(1970, 1, 2)
# The schema restores go to (docs/history.md, "Restore").
AUDIT_SCHEMA = "history_audit"

_LIVE = sorted(
    s.value for s in (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT)
)
# The live states as the partial indexes' predicates spell them (run_timer_by_partition,
# run_in_flight_by_job), so that with the tables locked the check reads two small indexes of
# the day, not the day.
_LIVE_BY_INDEX = ("('pending', 'retry_wait')", "('queued', 'running', 'retry_wait')")


class Progress:
    """What a pass reports while it works; the command draws it, the duty ignores it."""

    def step(self, day: date, step: str, total: int) -> None:
        """``day`` starts ``step`` (export, verify, ...), over about ``total`` rows."""

    def rows(self, n: int) -> None:
        """``n`` more rows of the current step done."""


class ArchiveFailed(Exception):
    """An archive step could not be completed; the day keeps its recorded step."""


def archive_root() -> Path:
    return Path(settings.SCHEDULER["ARCHIVE_DIR"])


def hot_cutoff(now: datetime) -> date:
    """The first day of the hot window: days before it are archived."""
    return (now - timedelta(days=settings.SCHEDULER["HISTORY_HOT_DAYS"])).date()


def dead_letter_table(day: date) -> str:
    return f"jobs_deadletter_a{day:%Y%m%d}"


@dataclass
class DayOutcome:
    day: date
    # archived, held (kept hot, reason says why), busy (locks not available now), would_archive
    # (dry run), failed.
    outcome: str
    reason: str = ""
    runs: int = 0
    attempts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class ArchiveReport:
    days: list[DayOutcome] = field(default_factory=list)
    # Another archive held the lock: this pass did nothing.
    locked_out: bool = False

    def by(self, outcome: str) -> list[DayOutcome]:
        return [d for d in self.days if d.outcome == outcome]


def _partition_days() -> set[date]:
    """Days that have both partitions attached."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = ANY(ARRAY[%s, %s]::regclass[])
            """,
            [RUN_TABLE, ATTEMPT_TABLE],
        )
        found: dict[date, set[str]] = {}
        for (name,) in cursor.fetchall():
            parsed = parse_partition_name(name)
            if parsed is not None:
                found.setdefault(parsed[1], set()).add(parsed[0])
    return {day for day, tables in found.items() if len(tables) == 2}


def _runs_of(day: date, *, in_default: bool) -> str:
    """The table holding the day's runs: its partition, or the default partition."""
    return default_partition_name(RUN_TABLE) if in_default else partition_name(RUN_TABLE, day)


def _hold_reason(cursor: object, day: date, now: datetime, *, full: bool, in_default: bool) -> str:
    """Why the day must stay hot, or ''. ``full`` also scans the day for runs that failed
    within the retention (a sequential scan of the partition, done before any lock); without
    it only what can change while the day waits is checked, through partial indexes."""
    low, high = day_id_range(day)
    runs = _runs_of(day, in_default=in_default)
    # The day's id range: the whole table for a day partition, the day's rows in the default.
    of_day = "id >= %(low)s AND id < %(high)s"
    retained = now - dead_letter_retention()
    checks = [
        ("a live run", f"SELECT 1 FROM {runs} WHERE state IN {states} AND {of_day} LIMIT 1")
        for states in _LIVE_BY_INDEX
    ]
    checks.append(
        (
            "an open or retained dead letter",
            f"""SELECT 1 FROM jobs_deadletter dl JOIN {runs} r ON r.id = dl.run_id
                 WHERE dl.run_id >= %(low)s AND dl.run_id < %(high)s
                   AND (r.state = %(dead)s OR r.state = ANY(%(live)s)
                        OR dl.replayed_at IS NULL OR dl.replayed_at >= %(retained)s)
                 LIMIT 1""",
        )
    )
    if full:
        # One scan of the day for both (no index serves them).
        checks.append(
            (
                "a dead run, or a run that failed within the dead-letter retention",
                f"""SELECT 1 FROM {runs} WHERE {of_day} AND (state = %(dead)s
                        OR (state = %(failed)s AND finished_at >= %(retained)s)) LIMIT 1""",
            )
        )
    params = {
        "live": _LIVE,
        "dead": RunState.DEAD.value,
        "failed": RunState.FAILED.value,
        "low": low,
        "high": high,
        "retained": retained,
    }
    for reason, sql in checks:
        cursor.execute(sql, params)  # type: ignore[attr-defined]
        if cursor.fetchone() is not None:  # type: ignore[attr-defined]
            return reason
    return ""


def _count_day(cursor: object, day: date, *, in_default: bool) -> int:
    if not in_default:
        return _count(cursor, partition_name(RUN_TABLE, day))
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT count(*) FROM {default_partition_name(RUN_TABLE)} WHERE id >= %s AND id < %s",
        list(day_id_range(day)),
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _count(cursor: object, table: str) -> int:
    cursor.execute(f"SELECT count(*) FROM {table}")  # type: ignore[attr-defined]
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _drop_foreign_keys(cursor: object, table: str) -> None:
    """A detached partition keeps copies of its parent's foreign keys; they would tie the
    detached rows to jobs and runs that may go meanwhile (and the attempts' to the runs'
    partition, which then could not be detached)."""
    cursor.execute(  # type: ignore[attr-defined]
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    for (name,) in cursor.fetchall():  # type: ignore[attr-defined]
        cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')  # type: ignore[attr-defined]


def _detach(day: date, now: datetime, *, in_default: bool) -> str:
    """Step 1; '' once detached, else why not (the day stays as it was).

    A day in the default partition (it had no partition of its own when its runs were written)
    is detached by moving its rows out instead: copied into tables of the day partitions'
    names and deleted from the default partitions, in the same transaction. That locks the two
    default partitions against writes, not the runs table, for as long as the day's rows take
    to copy."""
    low, high = day_id_range(day)
    runs, attempts = partition_name(RUN_TABLE, day), partition_name(ATTEMPT_TABLE, day)
    letters = dead_letter_table(day)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LAYOUT_LOCK_KEY])
            if in_default:
                cursor.execute(
                    f"LOCK TABLE {default_partition_name(RUN_TABLE)}, "
                    f"{default_partition_name(ATTEMPT_TABLE)} IN EXCLUSIVE MODE"
                )
            else:
                cursor.execute(f"LOCK TABLE {RUN_TABLE}, {ATTEMPT_TABLE} IN ACCESS EXCLUSIVE MODE")
            # With the tables locked nothing of the day can change: what could have since the
            # full check (a replay, a backfill's new pending run) is checked again.
            reason = _hold_reason(cursor, day, now, full=False, in_default=in_default)
            if reason:
                transaction.set_rollback(True)
                return reason
            cursor.execute(
                f"CREATE TABLE {letters} AS SELECT * FROM jobs_deadletter"
                " WHERE run_id >= %s AND run_id < %s",
                [low, high],
            )
            cursor.execute(
                "DELETE FROM jobs_deadletter WHERE run_id >= %s AND run_id < %s", [low, high]
            )
            cursor.execute(
                "DELETE FROM jobs_dedupkey WHERE run_id >= %s AND run_id < %s AND expires_at <= %s",
                [low, high, now],
            )
            cursor.execute(
                "UPDATE jobs_dedupkey SET run_id = NULL WHERE run_id >= %s AND run_id < %s",
                [low, high],
            )
            # The foreign keys' deferred checks of the statements above run now, not at the
            # commit after the detach.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            if in_default:
                _move_out_of_default(cursor, runs, attempts, low, high)
            else:
                cursor.execute(f"ALTER TABLE {ATTEMPT_TABLE} DETACH PARTITION {attempts}")
                _drop_foreign_keys(cursor, attempts)
                cursor.execute(f"ALTER TABLE {RUN_TABLE} DETACH PARTITION {runs}")
                _drop_foreign_keys(cursor, runs)
            ArchivedDay.objects.create(
                day=day,
                step=ArchiveStep.DETACHED,
                run_table=runs,
                attempt_table=attempts,
                dead_letter_table=letters,
                directory=str(fmt.day_directory(archive_root(), day)),
                detached_at=now,
                updated_at=now,
            )
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            return "busy"
        raise
    return ""


def _move_out_of_default(
    cursor: object, runs: str, attempts: str, low: object, high: object
) -> None:
    """The default partitions' rows of one day into tables of their own (the attempts deleted
    before their runs, whose foreign key they hold)."""
    for table, target, key in (
        (RUN_TABLE, runs, "id"),
        (ATTEMPT_TABLE, attempts, "run_id"),
    ):
        cursor.execute(  # type: ignore[attr-defined]
            f"CREATE TABLE {target} AS SELECT * FROM {default_partition_name(table)}"
            f" WHERE {key} >= %s AND {key} < %s",
            [low, high],
        )
    for table, key in ((ATTEMPT_TABLE, "run_id"), (RUN_TABLE, "id")):
        cursor.execute(  # type: ignore[attr-defined]
            f"DELETE FROM {default_partition_name(table)} WHERE {key} >= %s AND {key} < %s",
            [low, high],
        )


def _advance(record: ArchivedDay, to: ArchiveStep, now: datetime, **fields: object) -> None:
    """Compare-and-set of the day's step: from the step it was read in, to the next."""
    changed = ArchivedDay.objects.filter(day=record.day, step=record.step).update(
        step=to, updated_at=now, **fields
    )
    if changed != 1:
        raise ArchiveFailed(f"{record.day}: its step changed under this archive (another one?)")
    record.step = to
    for name, value in fields.items():
        setattr(record, name, value)


def _table_of(record: ArchivedDay, table: str) -> str:
    return {
        RUN_TABLE: record.run_table,
        ATTEMPT_TABLE: record.attempt_table,
        fmt.DEAD_LETTERS.table: record.dead_letter_table,
    }[table]


def _lines(table: str, schema: fmt.TableSchema, progress: Progress) -> Iterator[bytes]:
    """The table's archive lines, as PostgreSQL renders them: COPY's text format, one column
    a row. A line of JSON holds no tab, newline or other control character (JSON escapes
    them), so the only escape COPY adds is a doubled backslash, undone here."""
    with connection.cursor() as cursor:
        copy_sql = f"COPY (SELECT {schema.line_sql()} FROM {table} AS t) TO STDOUT"
        with cursor.copy(copy_sql) as copy:
            n = 0
            for data in copy:
                line = bytes(data).removesuffix(b"\n")
                if b"\\" in line:
                    line = line.replace(b"\\\\", b"\\")
                n += 1
                if n == PROGRESS_EVERY:
                    progress.rows(n)
                    n = 0
                yield line
            progress.rows(n)


def _estimate(record: ArchivedDay) -> int:
    """The detached tables' rows as PostgreSQL estimates them (for the progress bar only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(greatest(reltuples, 0)), 0) FROM pg_class"
            " WHERE oid = ANY(ARRAY[to_regclass(%s), to_regclass(%s), to_regclass(%s)])",
            [record.run_table, record.attempt_table, record.dead_letter_table],
        )
        return int(cursor.fetchone()[0])


def _export(record: ArchivedDay, now: datetime, progress: Progress) -> None:
    """Step 2: the files, then the manifest that names them."""
    directory = Path(record.directory)
    progress.step(record.day, "export", record.runs + record.attempts or _estimate(record))
    entries = []
    for schema in fmt.TABLES:
        lines = _lines(_table_of(record, schema.table), schema, progress)
        entries.append(fmt.write_table(directory, schema.table, lines))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT min(scheduled_for), max(scheduled_for) FROM {record.run_table}")
        first, last = cursor.fetchone()
    manifest = fmt.Manifest(
        day=record.day,
        created_at=now,
        min_scheduled_for=first,
        max_scheduled_for=last,
        files=tuple(entries),
    )
    sha = fmt.write_manifest(directory, manifest)
    counts = {e.table: e.rows for e in entries}
    _advance(
        record,
        ArchiveStep.EXPORTED,
        now,
        manifest_sha256=sha,
        runs=counts[RUN_TABLE],
        attempts=counts[ATTEMPT_TABLE],
        dead_letters=counts[fmt.DEAD_LETTERS.table],
    )


def table_digest(table: str, schema: fmt.TableSchema) -> tuple[int, int]:
    """(rows, row digest) of a table as PostgreSQL sees it, over the lines it exports."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), {fmt.ROW_DIGEST_SQL} FROM "
            f"(SELECT {schema.line_sql()} AS line FROM {table} AS t) AS lines"
        )
        rows, digest = cursor.fetchone()
    return int(rows), int(digest)


def _verify(record: ArchivedDay, now: datetime, progress: Progress) -> None:
    """Step 3: the files against their manifest, and the manifest against the tables."""
    directory = Path(record.directory)
    progress.step(record.day, "verify", record.runs + record.attempts + record.dead_letters)
    try:
        manifest, sha = fmt.verify_archive(directory, on_rows=progress.rows)
        if sha != record.manifest_sha256:
            raise ArchiveError(f"{directory}: the manifest is not the one this archive wrote")
        for schema in fmt.TABLES:
            entry = manifest.entry(schema.table)
            rows, digest = table_digest(_table_of(record, schema.table), schema)
            if (rows, digest) != (entry.rows, entry.row_digest):
                raise ArchiveError(
                    f"{directory / entry.file}: {entry.rows} rows (digest {entry.row_digest}), "
                    f"the table {_table_of(record, schema.table)} {rows} (digest {digest})"
                )
    except ArchiveError as exc:
        # Exported again by the next pass; the detached tables are still there.
        _advance(record, ArchiveStep.DETACHED, now, manifest_sha256="")
        raise ArchiveFailed(f"{record.day}: verification failed: {exc}") from None
    _advance(record, ArchiveStep.VERIFIED, now)


def _files_in_place(record: ArchivedDay) -> bool:
    """The verified files are still where they were verified (a node holding partition 0 on
    another host may not see them): the manifest is the recorded one and every file has its
    size. The next pass exports again otherwise."""
    directory = Path(record.directory)
    try:
        manifest, sha = fmt.read_manifest(directory)
        return sha == record.manifest_sha256 and all(
            (directory / e.file).stat().st_size == e.bytes for e in manifest.files
        )
    except (ArchiveError, OSError):
        return False


def _drop(record: ArchivedDay, now: datetime) -> str:
    """Step 4; '' once dropped, 'busy' when the locks are not available now."""
    if not _files_in_place(record):
        _advance(record, ArchiveStep.DETACHED, now, manifest_sha256="")
        raise ArchiveFailed(f"{record.day}: its verified files are gone from {record.directory}")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LAYOUT_LOCK_KEY])
            for table in (record.attempt_table, record.run_table, record.dead_letter_table):
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
            _advance(record, ArchiveStep.ARCHIVED, now)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":
            record.refresh_from_db()
            return "busy"
        raise
    return ""


def _finish(record: ArchivedDay, clock: Callable[[], datetime], progress: Progress) -> DayOutcome:
    """Steps 2-4, from the day's recorded step."""
    outcome = DayOutcome(record.day, "archived")
    if record.step == ArchiveStep.DETACHED:
        started = time.monotonic()
        _export(record, clock(), progress)
        outcome.seconds["export"] = time.monotonic() - started
    if record.step == ArchiveStep.EXPORTED:
        started = time.monotonic()
        _verify(record, clock(), progress)
        outcome.seconds["verify"] = time.monotonic() - started
    if record.step == ArchiveStep.VERIFIED:
        progress.step(record.day, "drop", 0)
        started = time.monotonic()
        if _drop(record, clock()):
            return DayOutcome(record.day, "busy", "the drop could not get its locks now")
        outcome.seconds["drop"] = time.monotonic() - started
    outcome.runs, outcome.attempts = record.runs, record.attempts
    return outcome


def _try_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ARCHIVE_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def _unlock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s)", [ARCHIVE_LOCK_KEY])


def default_days(before: date) -> set[date]:
    """UTC days before ``before`` with runs in the default partition. Days before
    FIRST_ARCHIVED_DAY are left out: their ids all start with 0 (jobs/run_ids.py), so no id
    range holds one day of them."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT DISTINCT (scheduled_for AT TIME ZONE 'UTC')::date
              FROM {default_partition_name(RUN_TABLE)}
             WHERE scheduled_for >= %s AND scheduled_for < %s
            """,
            [day_start(FIRST_ARCHIVED_DAY), day_start(before)],
        )
        return {row[0] for row in cursor.fetchall()}


def archive_candidates(before: date) -> tuple[list[ArchivedDay], list[tuple[date, bool]]]:
    """Days whose archive is under way (oldest first), and days before ``before`` with
    partitions or with rows in the default partition that have none yet (day, in_default)."""
    unfinished = list(ArchivedDay.objects.exclude(step=ArchiveStep.ARCHIVED).order_by("day"))
    recorded = set(ArchivedDay.objects.values_list("day", flat=True))
    partitioned = {day for day in _partition_days() if day < before}
    fresh = {(day, False) for day in partitioned} | {
        (day, True) for day in default_days(before) if day not in partitioned
    }
    return unfinished, sorted(item for item in fresh if item[0] not in recorded)


def reappeared_days(before: date) -> list[date]:
    """Archived days that have runs again (a later backfill of the day wrote them, to new
    partitions or to the default): they stay hot; their archive keeps what was archived."""
    archived = set(
        ArchivedDay.objects.filter(step=ArchiveStep.ARCHIVED).values_list("day", flat=True)
    )
    again = {day for day in _partition_days() if day < before} | default_days(before)
    return sorted(day for day in again if day in archived)


def _archive_day(
    day: date, clock: Callable[[], datetime], progress: Progress, *, dry_run: bool, in_default: bool
) -> DayOutcome:
    """A day with partitions, or rows in the default, and no archive yet: checked, then all
    four steps."""
    with connection.cursor() as cursor:
        reason = _hold_reason(cursor, day, clock(), full=True, in_default=in_default)
        runs = _count_day(cursor, day, in_default=in_default) if dry_run else 0
    if reason:
        return DayOutcome(day, "held", reason)
    if dry_run:
        return DayOutcome(day, "would_archive", runs=runs)
    progress.step(day, "detach", 0)
    started = time.monotonic()
    reason = _detach(day, clock(), in_default=in_default)
    detach_s = time.monotonic() - started
    if reason == "busy":
        return DayOutcome(day, "busy", "the detach could not get its locks now")
    if reason:
        return DayOutcome(day, "held", reason)
    outcome = _finish(ArchivedDay.objects.get(day=day), clock, progress)
    outcome.seconds["detach"] = detach_s
    return outcome


def _count_outcomes(report: ArchiveReport) -> None:
    for outcome in ("archived", "held", "busy"):
        days = report.by(outcome)
        if days:
            HISTORY_ARCHIVE_DAYS.labels(outcome=outcome).inc(len(days))
    archived = report.by("archived")
    for table, rows in ((RUN_TABLE, sum(d.runs for d in archived)),
                        (ATTEMPT_TABLE, sum(d.attempts for d in archived))):  # fmt: skip
        if rows:
            HISTORY_ARCHIVED_ROWS.labels(table=table).inc(rows)


def archive_days(
    *,
    before: date,
    clock: Callable[[], datetime],
    dry_run: bool = False,
    progress: Progress | None = None,
    on_day: Callable[[DayOutcome], None] | None = None,
) -> ArchiveReport:
    """Archive every day before ``before`` that nothing still needs, finishing first the days
    a previous pass left under way. ``clock`` is the database's."""
    report = ArchiveReport()
    shown = progress or Progress()

    def done(outcome: DayOutcome) -> None:
        report.days.append(outcome)
        if on_day is not None:
            on_day(outcome)

    if not _try_lock():
        report.locked_out = True
        return report
    try:
        unfinished, fresh = archive_candidates(before)
        for day in reappeared_days(before):
            done(DayOutcome(day, "held", "already archived; a later write created it again"))
        for record in unfinished:
            if dry_run:
                done(DayOutcome(record.day, "would_archive", f"resumes after {record.step}"))
                continue
            done(_finish(record, clock, shown))
        for day, in_default in fresh:
            done(_archive_day(day, clock, shown, dry_run=dry_run, in_default=in_default))
    finally:
        _unlock()
    _count_outcomes(report)
    for outcome in report.by("archived"):
        logger.info(
            "history.day_archived",
            extra={
                "day": outcome.day.isoformat(),
                "runs": outcome.runs,
                "attempts": outcome.attempts,
                **{f"{step}_s": round(s, 3) for step, s in outcome.seconds.items()},
            },
        )
    return report
