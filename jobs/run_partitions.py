"""Names, bounds and DDL of the day partitions of the run history (docs/history.md, "Partitions").

``jobs_jobrun`` is partitioned BY RANGE (id) and ``jobs_runattempt`` BY RANGE (run_id), one
partition per UTC day of the runs' ``scheduled_for``, with the same bounds for both tables
(jobs/run_ids.py): ``<table>_pYYYYMMDD`` FOR VALUES FROM (day_id_range(day)[0]) TO
(day_id_range(day)[1]), and a DEFAULT partition ``<table>_default`` for the days that have
none. These names are a contract (archives and restores find partitions by them): changing
them is a migration.

Pure: names and SQL text only. jobs/services/history_partitions.py runs them.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from jobs.run_ids import day_id_range, day_start, run_id_prefix_sql

RUN_TABLE = "jobs_jobrun"
ATTEMPT_TABLE = "jobs_runattempt"
# Runs first: an attempt's partition is created after its runs', and dropped before them.
TABLES = (RUN_TABLE, ATTEMPT_TABLE)
# What each table is partitioned by.
PARTITION_KEYS = {RUN_TABLE: "id", ATTEMPT_TABLE: "run_id"}

# On the partitioned runs table, so on every partition: a run's id carries its firing's
# millisecond (jobs/run_ids.py). It is what makes the per-partition unique firing keys one
# global key: a row whose id did not come from its scheduled_for could land in another day's
# partition than its firing's twin. Database-only (Django's state does not evaluate it).
# The id's first 6 bytes are the firing's prefix: the same rows as `id BETWEEN
# jobs_run_id_floor(scheduled_for) AND jobs_run_id_ceil(scheduled_for)` (its form until
# migration 0016), written with built-in functions only. PostgreSQL prepares a table's CHECKs
# anew in every statement that inserts or updates its rows (every claim, published mark,
# start, heartbeat and outcome), and inlining the two functions there read their stored bodies
# back each time: about 9% of a worker's PostgreSQL backend's CPU (docs/execution.md, "What
# each write of a run costs PostgreSQL").
RUN_ID_CHECK_NAME = "run_id_matches_firing"
RUN_ID_CHECK_SQL = f"substring(uuid_send(id) FROM 1 FOR 6) = {run_id_prefix_sql('scheduled_for')}"

# Every DDL on the partitions (creating, detaching, dropping, attaching) takes this
# transaction-level advisory lock first, so two processes never change the layout at once.
LAYOUT_LOCK_KEY = 0x6A6F62735F706172  # "jobs_par"

# The first day a partition can cover: ids before 1970 all have the prefix 0 (jobs/run_ids.py)
# and stay in the default partition.
FIRST_DAY = date(1970, 1, 1)

_DAY_NAME = re.compile(r"^(jobs_jobrun|jobs_runattempt)_p(\d{8})$")


def partition_name(table: str, day: date) -> str:
    if table not in TABLES:
        raise ValueError(f"{table} is not a partitioned history table")
    return f"{table}_p{day:%Y%m%d}"


def default_partition_name(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"{table} is not a partitioned history table")
    return f"{table}_default"


def parse_partition_name(name: str) -> tuple[str, date] | None:
    """(table, day) of a day partition's name; None for any other name (the default too)."""
    match = _DAY_NAME.match(name)
    if match is None:
        return None
    text = match.group(2)
    try:
        return match.group(1), date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        return None


def days_between(first: date, last: date) -> list[date]:
    """Every day from ``first`` to ``last``, both included, that a partition can cover."""
    first = max(first, FIRST_DAY)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _literal(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def bounds_sql(day: date) -> str:
    low, high = day_id_range(day)
    return f"FROM ({_literal(low)}) TO ({_literal(high)})"


def firing_day_check_sql(day: date) -> str:
    """The CHECK a run partition has beside its bounds: its rows' scheduled_for is its day.

    With it, the partition's unique index on (job_id, scheduled_for) is the unique firing key
    for that day, and since a day's firings are in exactly one partition, the per-partition
    keys together are the global one (docs/history.md, "Partitions").
    """
    start = day_start(day)
    end = start + timedelta(days=1)
    return (
        f"scheduled_for >= {_literal(start.isoformat())}::timestamptz "
        f"AND scheduled_for < {_literal(end.isoformat())}::timestamptz"
    )


def firing_index_name(partition: str) -> str:
    return f"{partition}_firing"


def create_day_partition_sql(table: str, day: date) -> list[str]:
    """Statements that create ``table``'s partition for ``day`` and attach it.

    Created beside the table and then attached, not ``CREATE TABLE ... PARTITION OF``: ATTACH
    takes SHARE UPDATE EXCLUSIVE on the parent, so claims and outcomes go on meanwhile (only
    the default partition is locked exclusively, and scanned for rows of the day); the new
    table's CHECK on its bounds spares the scan of the new table itself.
    """
    name = partition_name(table, day)
    key = PARTITION_KEYS[table]
    low, high = day_id_range(day)
    statements = [
        f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        f"INCLUDING STORAGE)",
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bounds "
        f"CHECK ({key} >= {_literal(low)} AND {key} < {_literal(high)})",
    ]
    if table == RUN_TABLE:
        statements += [
            f"ALTER TABLE {name} ADD CONSTRAINT {name}_firing_day "
            f"CHECK ({firing_day_check_sql(day)})",
            f"CREATE UNIQUE INDEX {firing_index_name(name)} ON {name} (job_id, scheduled_for)",
        ]
    statements += [
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES {bounds_sql(day)}",
        # The bounds are the partition constraint now: the CHECK only served the attach.
        f"ALTER TABLE {name} DROP CONSTRAINT {name}_bounds",
    ]
    return statements


def create_default_partition_sql(table: str) -> list[str]:
    """The default partition: no day CHECK, and for runs the same unique (job_id, scheduled_for).

    All of one day's rows are in one place (the day's partition when it exists, else the
    default: PostgreSQL refuses to attach a day while the default holds rows of it), so the
    default's unique index covers every firing of every day without a partition.
    """
    name = default_partition_name(table)
    statements = [f"CREATE TABLE {name} PARTITION OF {table} DEFAULT"]
    if table == RUN_TABLE:
        statements.append(
            f"CREATE UNIQUE INDEX {firing_index_name(name)} ON {name} (job_id, scheduled_for)"
        )
    return statements
