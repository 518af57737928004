"""Loading an archived day back for an audit (docs/history.md, "Restore").

A day is restored into tables of its own in the ``history_audit`` schema
(``history_audit.jobs_jobrun_pYYYYMMDD``, ``..._runattempt_...``, ``..._deadletter_...``), not
into the runs table: there the day would be hot again (the API, the timers and the reaper
would see runs long finished, and the next archive pass would archive it once more), and its
firings could collide with runs written for that day since it was archived (a backfill), which
the unique firing key would refuse. The audit tables have the day's own keys (the run id, the
firing (job_id, scheduled_for), an attempt's (run_id, attempt)) and the runs table's CHECKs,
so what is restored is what was archived, once.

The archive is verified first (every file against the manifest); then one transaction creates
the tables, loads them and compares each one's row count and row digest with the manifest. Any
error rolls it all back: nothing changed. Restoring a day already restored from the same
archive changes nothing; from another archive of that day, it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.db import DataError, IntegrityError, connection, transaction

from jobs import archive_format as fmt
from jobs.archive_format import ArchiveError
from jobs.services.run_archive import AUDIT_SCHEMA, Progress, table_digest

# Restores of one day wait for each other (a transaction advisory lock per day): two at once
# would both find no table and race on creating it. The key's high half spells "REST".
_RESTORE_LOCK_BASE = 0x52455354 << 32
_LOAD_BATCH = 10_000


@dataclass(frozen=True)
class RestoreReport:
    day: str
    tables: dict[str, int]
    # The same archive was restored before: nothing was loaded.
    already: bool = False


def audit_table(table: str, day_text: str) -> str:
    return f"{AUDIT_SCHEMA}.{table}_p{day_text.replace('-', '')}"


def _restored_from(cursor: object, name: str) -> str | None:
    """The manifest SHA-256 an audit table was restored from; None when it does not exist."""
    cursor.execute(  # type: ignore[attr-defined]
        "SELECT to_regclass(%s) IS NOT NULL, obj_description(to_regclass(%s), 'pg_class')",
        [name, name],
    )
    exists, comment = cursor.fetchone()  # type: ignore[attr-defined]
    if not exists:
        return None
    return str(comment or "").rpartition("manifest sha256 ")[2]


_KEYS = {
    fmt.RUNS.table: ["PRIMARY KEY (id)", "UNIQUE (job_id, scheduled_for)"],
    fmt.ATTEMPTS.table: ["PRIMARY KEY (id)", "UNIQUE (run_id, attempt)"],
    fmt.DEAD_LETTERS.table: ["PRIMARY KEY (id)", "UNIQUE (run_id)"],
}


def _load(
    cursor: object,
    name: str,
    directory: Path,
    schema: fmt.TableSchema,
    entry: fmt.FileEntry,
    progress: Progress,
) -> None:
    cursor.execute(  # type: ignore[attr-defined]
        f"CREATE TABLE {name} (LIKE {schema.table} INCLUDING CONSTRAINTS)"
    )
    for key in _KEYS[schema.table]:
        cursor.execute(f"ALTER TABLE {name} ADD {key}")  # type: ignore[attr-defined]
    cursor.execute("TRUNCATE pg_temp.restore_lines")  # type: ignore[attr-defined]
    # Into a jsonb column: each line is parsed once, not once per column read from it.
    with cursor.copy("COPY pg_temp.restore_lines (l) FROM STDIN") as copy:  # type: ignore[attr-defined]
        n = 0
        for line in fmt.read_lines(directory, entry):
            copy.write_row((line.decode(),))
            n += 1
            if n == _LOAD_BATCH:
                progress.rows(n)
                n = 0
        progress.rows(n)
    cursor.execute(  # type: ignore[attr-defined]
        f"INSERT INTO {name} ({schema.column_names()}) SELECT {schema.restore_sql()}"
        " FROM pg_temp.restore_lines"
    )


def restore_day(directory: Path, progress: Progress | None = None) -> RestoreReport:
    """Restore the archive in ``directory``; ArchiveError (nothing changed) when it is missing,
    bad or tampered with, or another archive of its day is restored already."""
    shown = progress or Progress()
    manifest, sha = fmt.read_manifest(directory)
    total = sum(e.rows for e in manifest.files)
    shown.step(manifest.day, "verify", total)
    manifest, sha = fmt.verify_archive(directory, on_rows=shown.rows)
    day_text = manifest.day.isoformat()
    names = {schema.table: audit_table(schema.table, day_text) for schema in fmt.TABLES}
    try:
        return _restore(directory, manifest, sha, names, shown)
    except (IntegrityError, DataError) as exc:
        # Rolled back: a row the archive holds twice, or a value the table refuses.
        raise ArchiveError(f"{directory}: rows that cannot be loaded: {exc}") from None


def _restore(
    directory: Path,
    manifest: fmt.Manifest,
    sha: str,
    names: dict[str, str],
    shown: Progress,
) -> RestoreReport:
    day_text = manifest.day.isoformat()
    total = sum(e.rows for e in manifest.files)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)", [_RESTORE_LOCK_BASE + manifest.day.toordinal()]
        )
        present = {table: _restored_from(cursor, name) for table, name in names.items()}
        if any(found is not None for found in present.values()):
            if all(found == sha for found in present.values()):
                counts = {t: manifest.entry(t).rows for t in names}
                return RestoreReport(day=day_text, tables=counts, already=True)
            raise ArchiveError(
                f"{day_text} is already restored in {AUDIT_SCHEMA} from another archive "
                f"(tables {', '.join(names.values())}); drop them first to restore this one"
            )
        cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {AUDIT_SCHEMA}")
        cursor.execute("CREATE TEMP TABLE IF NOT EXISTS restore_lines (l jsonb) ON COMMIT DROP")
        shown.step(manifest.day, "load", total)
        for schema in fmt.TABLES:
            entry = manifest.entry(schema.table)
            name = names[schema.table]
            _load(cursor, name, directory, schema, entry, shown)
            rows, digest = table_digest(name, schema)
            if (rows, digest) != (entry.rows, entry.row_digest):
                raise ArchiveError(
                    f"{directory / entry.file}: loaded {rows} rows (digest {digest}), the "
                    f"manifest says {entry.rows} (digest {entry.row_digest})"
                )
            cursor.execute(
                f"COMMENT ON TABLE {name} IS %s",
                [f"restored from {directory} manifest sha256 {sha}"],
            )
    return RestoreReport(day=day_text, tables={t: manifest.entry(t).rows for t in names})
