"""The archive's files and manifest (jobs/archive_format.py): what is written reads back, and
every way an archive can differ from its manifest is refused with a message naming the file."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from jobs import archive_format as fmt
from jobs.models import DeadLetter, JobRun, RunAttempt

DAY = date(2026, 11, 1)
LINES = [json.dumps({"id": f"run-{i}", "text": "caf\u00e9 \\ \u2603"}) for i in range(50)]
DATA = [line.encode() for line in LINES]


def _archive(directory: Path, lines: list[str] = LINES) -> fmt.Manifest:
    entries = tuple(
        fmt.write_table(
            directory, schema.table, [x.encode() for x in lines] if schema is fmt.RUNS else []
        )
        for schema in fmt.TABLES
    )
    manifest = fmt.Manifest(
        day=DAY,
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        min_scheduled_for=datetime(2026, 11, 1, 0, 1, tzinfo=UTC),
        max_scheduled_for=datetime(2026, 11, 1, 23, 59, tzinfo=UTC),
        files=entries,
    )
    fmt.write_manifest(directory, manifest)
    return manifest


def test_what_is_written_reads_back_and_verifies(tmp_path: Path) -> None:
    written = _archive(tmp_path)
    manifest, sha = fmt.verify_archive(tmp_path)
    assert manifest.files == written.files
    assert manifest.day == DAY
    assert len(sha) == 64
    runs = manifest.entry("jobs_jobrun")
    assert runs.rows == len(LINES)
    assert [line.decode() for line in fmt.read_lines(tmp_path, runs)] == LINES
    # Readable without this project: plain gzip, one JSON object a line.
    with gzip.open(tmp_path / "jobs_jobrun.jsonl.gz", "rt", encoding="utf-8") as stream:
        assert [json.loads(line)["id"] for line in stream] == [f"run-{i}" for i in range(50)]
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert raw["format"] == fmt.FORMAT
    assert raw["schema_version"] == fmt.SCHEMA_VERSION
    assert raw["from"] == "2026-11-01T00:00:00.000000Z"
    assert raw["until"] == "2026-11-02T00:00:00.000000Z"
    assert {f["table"]: f["rows"] for f in raw["files"]} == {
        "jobs_jobrun": 50,
        "jobs_runattempt": 0,
        "jobs_deadletter": 0,
    }
    assert raw["files"][0]["columns"][0] == {"name": "id", "type": "uuid", "nullable": False}


def test_the_same_rows_give_the_same_bytes_and_the_digest_ignores_order(tmp_path: Path) -> None:
    first = fmt.write_table(tmp_path / "a", "jobs_jobrun", DATA)
    again = fmt.write_table(tmp_path / "b", "jobs_jobrun", DATA)
    reversed_ = fmt.write_table(tmp_path / "c", "jobs_jobrun", DATA[::-1])
    assert first.sha256 == again.sha256
    assert reversed_.sha256 != first.sha256
    assert reversed_.row_digest == first.row_digest == fmt.row_digest(x.encode() for x in LINES)
    assert fmt.row_digest([b"a", b"b"]) != fmt.row_digest([b"a", b"c"])


def test_a_rewrite_replaces_the_file(tmp_path: Path) -> None:
    fmt.write_table(tmp_path, "jobs_jobrun", [b"{}"] * 3)
    entry = fmt.write_table(tmp_path, "jobs_jobrun", DATA)
    assert entry.rows == len(LINES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs_jobrun.jsonl.gz"]


def _tamper_byte(directory: Path) -> None:
    path = directory / "jobs_jobrun.jsonl.gz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _reorder_rows(directory: Path) -> None:
    # A valid gzip with the same rows but one changed: the SHA-256 and the digest differ.
    path = directory / "jobs_jobrun.jsonl.gz"
    lines = gzip.decompress(path.read_bytes()).splitlines()
    lines[0] = lines[0].replace(b"run-0", b"run-X")
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))


def _drop_file(directory: Path) -> None:
    (directory / "jobs_runattempt.jsonl.gz").unlink()


def _edit_manifest(key: str, value: object) -> object:
    def edit(directory: Path) -> None:
        path = directory / "manifest.json"
        raw = json.loads(path.read_text())
        if key.startswith("files."):
            raw["files"][0][key.removeprefix("files.")] = value
        else:
            raw[key] = value
        path.write_text(json.dumps(raw))

    return edit


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_tamper_byte, "jobs_jobrun.jsonl.gz"),
        (_reorder_rows, "jobs_jobrun.jsonl.gz: SHA-256"),
        (_drop_file, "jobs_runattempt.jsonl.gz: missing"),
        (_edit_manifest("files.rows", 49), "jobs_jobrun.jsonl.gz: 50 rows, the manifest says 49"),
        (_edit_manifest("files.file", "../../etc/passwd"), "names '../../etc/passwd'"),
        (_edit_manifest("files.table", "auth_user"), "unknown table 'auth_user'"),
        (_edit_manifest("schema_version", 99), "schema version 99"),
        (_edit_manifest("format", "other"), "is not a scheduler-run-history manifest"),
        (lambda d: (d / "manifest.json").write_text("{not json"), "is not JSON"),
        (lambda d: (d / "manifest.json").unlink(), "no manifest"),
    ],
    ids=[
        "flipped-byte", "changed-row", "missing-file", "row-count", "path-in-manifest",
        "unknown-table", "schema-version", "format", "manifest-not-json", "no-manifest",
    ],
)  # fmt: skip
def test_an_archive_that_differs_from_its_manifest_is_refused(
    tmp_path: Path, tamper: object, message: str
) -> None:
    _archive(tmp_path)
    tamper(tmp_path)  # type: ignore[operator]
    with pytest.raises(fmt.ArchiveError, match=message.replace("(", r"\(")):
        fmt.verify_archive(tmp_path)


@pytest.mark.parametrize(
    ("model", "schema"),
    [(JobRun, fmt.RUNS), (RunAttempt, fmt.ATTEMPTS), (DeadLetter, fmt.DEAD_LETTERS)],
)
def test_the_schema_names_every_column_of_its_table(model: type, schema: fmt.TableSchema) -> None:
    # A column added to the model without its place in the archive would be lost at the drop.
    fields = model._meta.concrete_fields  # type: ignore[attr-defined]
    assert model._meta.db_table == schema.table  # type: ignore[attr-defined]
    assert [f.column for f in fields] == [c.name for c in schema.columns]
    assert [f.null for f in fields] == [c.nullable for c in schema.columns]


def test_day_directories() -> None:
    assert fmt.day_directory(Path("/a"), DAY) == Path("/a/runs/2026/11/2026-11-01")
    assert fmt.day_bounds(DAY) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 11, 2, tzinfo=UTC),
    )
