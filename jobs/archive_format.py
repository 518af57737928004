"""The run-history archive's files: gzip JSON Lines with a stated schema, and a manifest
(docs/history.md, "Archive format").

One directory per UTC day of ``scheduled_for`` holds one file per table and ``manifest.json``.
Each line of a file is one row, a JSON object whose keys and value types are the table's
columns below, so a data team reads it with ``zcat`` and any JSON reader, without this project.
Lines are in no particular order.

The manifest states, per file, its row count, its SHA-256 and a row digest: the sum over its
lines of the first 60 bits of each line's MD5, a number that does not depend on the lines'
order, and that PostgreSQL computes over the same rows with ``ROW_DIGEST_SQL``. The verifier
re-reads every file and checks all three; the archive step then compares the count and the
digest with the table the lines came from before dropping it.

No Django here: this module writes and reads files, and the SQL it names is text the services
run (jobs/services/run_archive.py).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

FORMAT = "scheduler-run-history"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
SUFFIX = ".jsonl.gz"
# Level 6 (zlib's own default, not gzip's 9): most of the size for a fraction of the CPU.
COMPRESS_LEVEL = 6
_READ_CHUNK = 1 << 20
_PROGRESS_ROWS = 50_000
_WRITE_BLOCK = 256 * 1024


class ArchiveError(Exception):
    """An archive that is missing, unreadable, of another format, or not what its manifest
    says; the message names the file and what differs."""


@dataclass(frozen=True)
class Column:
    name: str
    # uuid, string, integer, boolean, timestamp (ISO 8601 UTC, microseconds, "Z"),
    # duration (seconds, a JSON number), json (any JSON value), uuid[] (array of uuid strings).
    type: str
    nullable: bool = False


# SQL that renders a column of table alias ``t`` as the JSON value the schema states.
_EXPORT_SQL = {
    "uuid": "t.{c}",
    "string": "t.{c}",
    "integer": "t.{c}",
    "boolean": "t.{c}",
    "timestamp": """to_char(t.{c} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')""",
    "duration": "extract(epoch FROM t.{c})",
    "json": "t.{c}",
    "uuid[]": "t.{c}",
}
# SQL that reads the column back from a line held as jsonb ``l``; a JSON null is SQL NULL.
_RESTORE_SQL = {
    "uuid": "(l->>'{c}')::uuid",
    "string": "l->>'{c}'",
    "integer": "(l->>'{c}')::bigint",
    "boolean": "(l->>'{c}')::boolean",
    "timestamp": "(l->>'{c}')::timestamptz",
    "duration": "((l->>'{c}') || ' seconds')::interval",
    "json": "NULLIF(l->'{c}', 'null'::jsonb)",
    "uuid[]": (
        "CASE WHEN jsonb_typeof(l->'{c}') = 'array' "
        "THEN ARRAY(SELECT jsonb_array_elements_text(l->'{c}'))::uuid[] END"
    ),
}


@dataclass(frozen=True)
class TableSchema:
    table: str
    columns: tuple[Column, ...]

    @property
    def file(self) -> str:
        return f"{self.table}{SUFFIX}"

    def line_sql(self) -> str:
        """One row of alias ``t`` as its archive line (json text)."""
        pairs = ", ".join(
            f"'{col.name}', {_EXPORT_SQL[col.type].format(c=col.name)}" for col in self.columns
        )
        return f"json_build_object({pairs})::text"

    def restore_sql(self) -> str:
        """The columns, in order, read back from a line held as jsonb ``l``."""
        return ", ".join(_RESTORE_SQL[col.type].format(c=col.name) for col in self.columns)

    def column_names(self) -> str:
        return ", ".join(col.name for col in self.columns)

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in self.columns]


def _cols(*specs: str) -> tuple[Column, ...]:
    """``"name:type"`` or ``"name:type?"`` (nullable)."""
    columns = []
    for spec in specs:
        name, kind = spec.split(":")
        columns.append(Column(name, kind.rstrip("?"), kind.endswith("?")))
    return tuple(columns)


RUNS = TableSchema(
    "jobs_jobrun",
    _cols(
        "id:uuid", "job_id:uuid", "tenant_id:integer", "partition:integer",
        "scheduled_for:timestamp", "trigger:string", "state:string", "due_at:timestamp?",
        "attempt:integer", "epoch:integer", "dedup_key:string", "worker:string",
        "lease_until:timestamp?", "cancel_requested:boolean", "held_by:string",
        "queued_at:timestamp?", "published_at:timestamp?", "started_at:timestamp?",
        "heartbeat_at:timestamp?", "finished_at:timestamp?", "lateness:duration?",
        "start_lag:duration?", "last_error:string", "result:json?", "replayed_count:integer",
        "upstream_run_ids:uuid[]", "created_at:timestamp",
    ),
)  # fmt: skip
ATTEMPTS = TableSchema(
    "jobs_runattempt",
    _cols(
        "id:integer", "run_id:uuid", "attempt:integer", "epoch:integer", "worker:string",
        "queued_at:timestamp?", "started_at:timestamp?", "finished_at:timestamp?",
        "outcome:string", "error:string",
    ),
)  # fmt: skip
# Closed dead letters of the day's runs (an open one keeps its day hot, docs/history.md).
DEAD_LETTERS = TableSchema(
    "jobs_deadletter",
    _cols(
        "id:integer", "run_id:uuid", "job_id:uuid", "tenant_id:integer", "attempts:integer",
        "last_error:string", "moved_at:timestamp", "replayed_at:timestamp?",
        "replay_count:integer",
    ),
)  # fmt: skip
TABLES = (RUNS, ATTEMPTS, DEAD_LETTERS)
SCHEMAS = {schema.table: schema for schema in TABLES}

# The row digest in SQL, over ``line`` (a query's column of archive lines): the same number
# as ``row_digest`` over the same lines.
ROW_DIGEST_SQL = "coalesce(sum(('x' || left(md5(line), 15))::bit(60)::bigint), 0)"


def line_digest(line: bytes) -> int:
    """The first 60 bits of the line's MD5 (``left(md5(line), 15)`` in SQL)."""
    return int.from_bytes(hashlib.md5(line).digest()[:8], "big") >> 4


def row_digest(lines: Iterable[bytes]) -> int:
    return sum(line_digest(line) for line in lines)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def day_directory(root: Path, day: date) -> Path:
    """Where a day's archive lives under the archive root: runs/YYYY/MM/YYYY-MM-DD."""
    return root / "runs" / f"{day:%Y}" / f"{day:%m}" / day.isoformat()


def iso(instant: datetime | None) -> str | None:
    if instant is None:
        return None
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class FileEntry:
    table: str
    file: str
    rows: int
    bytes: int
    sha256: str
    # An int in memory, a decimal string in the manifest (JSON readers lose big integers).
    row_digest: int


@dataclass(frozen=True)
class Manifest:
    day: date
    created_at: datetime
    min_scheduled_for: datetime | None
    max_scheduled_for: datetime | None
    files: tuple[FileEntry, ...]
    schema_version: int = SCHEMA_VERSION

    def entry(self, table: str) -> FileEntry:
        for entry in self.files:
            if entry.table == table:
                return entry
        raise ArchiveError(f"the manifest lists no file for table {table}")

    def to_json(self) -> dict[str, Any]:
        start, end = day_bounds(self.day)
        return {
            "format": FORMAT,
            "schema_version": self.schema_version,
            "day": self.day.isoformat(),
            "from": iso(start),
            "until": iso(end),
            "min_scheduled_for": iso(self.min_scheduled_for),
            "max_scheduled_for": iso(self.max_scheduled_for),
            "created_at": iso(self.created_at),
            "files": [
                {
                    "table": e.table,
                    "file": e.file,
                    "rows": e.rows,
                    "bytes": e.bytes,
                    "sha256": e.sha256,
                    "row_digest": str(e.row_digest),
                    "columns": SCHEMAS[e.table].describe(),
                }
                for e in self.files
            ],
        }


class _Hashing(io.RawIOBase):
    """The file under the gzip stream: hashes and counts every compressed byte written."""

    def __init__(self, raw: io.BufferedWriter) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.size += len(view)
        self._raw.write(view)
        return len(view)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_table(directory: Path, table: str, lines: Iterable[bytes]) -> FileEntry:
    """Write one table's lines (UTF-8, without their newline) to ``directory``: first under a
    temporary name, synced, then renamed, so a crash never leaves a half file under the final
    name. Writing again replaces the file (the archive step is restartable)."""
    schema = SCHEMAS[table]
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / schema.file
    partial = directory / f"{schema.file}.partial"
    rows = digest = 0
    with partial.open("wb") as raw:
        hashing = _Hashing(raw)
        # mtime=0: the same rows give the same bytes, so a re-export has the same SHA-256.
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=hashing, compresslevel=COMPRESS_LEVEL, mtime=0
        ) as out:
            # Lines go to the compressor a block at a time: a write per line costs more
            # than the line's compression.
            block: list[bytes] = []
            size = 0
            for data in lines:
                block.append(data)
                size += len(data) + 1
                rows += 1
                digest += line_digest(data)
                if size >= _WRITE_BLOCK:
                    block.append(b"")
                    out.write(b"\n".join(block))
                    block, size = [], 0
            if block:
                block.append(b"")
                out.write(b"\n".join(block))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, final)
    _fsync_directory(directory)
    return FileEntry(
        table=table,
        file=schema.file,
        rows=rows,
        bytes=hashing.size,
        sha256=hashing.sha256.hexdigest(),
        row_digest=digest,
    )


def write_manifest(directory: Path, manifest: Manifest) -> str:
    """Write manifest.json last (after every file it names), atomically; returns its SHA-256."""
    data = (json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n").encode()
    partial = directory / f"{MANIFEST}.partial"
    with partial.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, directory / MANIFEST)
    _fsync_directory(directory)
    return hashlib.sha256(data).hexdigest()


def _instant(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise ArchiveError(f"manifest: {name} {value!r} is not an ISO 8601 instant") from None
    if parsed.utcoffset() is None:
        raise ArchiveError(f"manifest: {name} {value!r} has no UTC offset")
    return parsed


def _entry(raw: Any, index: int) -> FileEntry:
    if not isinstance(raw, dict):
        raise ArchiveError(f"manifest: files[{index}] is not an object")
    try:
        table, file = str(raw["table"]), str(raw["file"])
        rows, size = int(raw["rows"]), int(raw["bytes"])
        sha256, digest = str(raw["sha256"]), int(str(raw["row_digest"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"manifest: files[{index}] lacks a valid {exc}") from None
    if table not in SCHEMAS:
        raise ArchiveError(f"manifest: files[{index}] names an unknown table {table!r}")
    if file != SCHEMAS[table].file:
        # Names come from the schema, never from the manifest: no path leaves the directory.
        raise ArchiveError(f"manifest: files[{index}] names {file!r}, not {SCHEMAS[table].file}")
    return FileEntry(table, file, rows, size, sha256, digest)


def read_manifest(directory: Path) -> tuple[Manifest, str]:
    """The manifest of the archive in ``directory`` and its SHA-256; ArchiveError when it is
    missing, not JSON, of another format or schema version, or incomplete."""
    path = directory / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveError(f"{path}: no manifest (not an archive directory)") from None
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ArchiveError(f"{path}: is not JSON") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ArchiveError(f"{path}: is not a {FORMAT} manifest")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise ArchiveError(
            f"{path}: schema version {raw.get('schema_version')!r}; this version reads "
            f"{SCHEMA_VERSION}"
        )
    try:
        day = date.fromisoformat(str(raw["day"]))
    except (KeyError, ValueError):
        raise ArchiveError(f"{path}: no valid day") from None
    files = raw.get("files")
    if not isinstance(files, list):
        raise ArchiveError(f"{path}: no list of files")
    entries = tuple(_entry(item, i) for i, item in enumerate(files))
    if sorted(e.table for e in entries) != sorted(SCHEMAS):
        raise ArchiveError(f"{path}: lists {[e.table for e in entries]}, not {sorted(SCHEMAS)}")
    manifest = Manifest(
        day=day,
        created_at=_instant(raw.get("created_at"), "created_at")
        or datetime.min.replace(tzinfo=UTC),
        min_scheduled_for=_instant(raw.get("min_scheduled_for"), "min_scheduled_for"),
        max_scheduled_for=_instant(raw.get("max_scheduled_for"), "max_scheduled_for"),
        files=entries,
    )
    return manifest, hashlib.sha256(data).hexdigest()


class _HashingReader(io.RawIOBase):
    """The file under the gzip stream on reading: hashes every compressed byte read."""

    def __init__(self, raw: io.BufferedReader) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)
        if n:
            self.sha256.update(memoryview(buffer)[:n])
        return n or 0

    def drain(self) -> None:
        while chunk := self._raw.read(_READ_CHUNK):
            self.sha256.update(chunk)


def _open(path: Path) -> io.BufferedReader:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read: {exc.strerror}") from None


def _lines(path: Path, source: io.RawIOBase | io.BufferedReader) -> Iterator[bytes]:
    try:
        with gzip.GzipFile(fileobj=source, mode="rb") as stream:
            for line in stream:
                yield line.rstrip(b"\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(f"{path}: not a readable gzip file ({exc})") from None


def read_lines(directory: Path, entry: FileEntry) -> Iterator[bytes]:
    """The lines of one file, without their newline; ArchiveError when it is missing or not
    gzip."""
    path = directory / entry.file
    with _open(path) as raw:
        yield from _lines(path, raw)


def verify_file(
    directory: Path, entry: FileEntry, on_rows: Callable[[int], None] | None = None
) -> None:
    """Re-read one file (one pass) and check its SHA-256, its row count and its row digest
    against the manifest's entry."""
    path = directory / entry.file
    rows = digest = 0
    with _open(path) as raw:
        hashing = _HashingReader(raw)
        for line in _lines(path, hashing):
            rows += 1
            digest += line_digest(line)
            if on_rows is not None and rows % _PROGRESS_ROWS == 0:
                on_rows(_PROGRESS_ROWS)
        hashing.drain()
    if on_rows is not None:
        on_rows(rows % _PROGRESS_ROWS)
    sha = hashing.sha256.hexdigest()
    if sha != entry.sha256:
        raise ArchiveError(f"{path}: SHA-256 {sha}, the manifest says {entry.sha256}")
    if rows != entry.rows:
        raise ArchiveError(f"{path}: {rows} rows, the manifest says {entry.rows}")
    if digest != entry.row_digest:
        raise ArchiveError(f"{path}: row digest {digest}, the manifest says {entry.row_digest}")


def verify_archive(
    directory: Path, on_rows: Callable[[int], None] | None = None
) -> tuple[Manifest, str]:
    """The manifest, once every file it names is what it says (ArchiveError otherwise)."""
    manifest, sha = read_manifest(directory)
    for entry in manifest.files:
        verify_file(directory, entry, on_rows)
    return manifest, sha
