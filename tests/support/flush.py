"""How a transactional test's database is emptied after it: DELETE for the few rows most
tests leave, Django's TRUNCATE past that.

Django empties every table with one TRUNCATE, which gives each table, each index and each
day partition of the run history (docs/history.md, "Partitions") a new file: about 0.4-0.8 s
on a 2-core machine, even when the test left the tables nearly empty. Deleting a few hundred
rows takes about 0.03 s. Past a few thousand rows, the deletes' foreign-key checks (every
foreign key is deferred to the commit) cost more than the new files, so such a flush still
truncates. Either way every table is empty afterwards, in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db.backends.postgresql.operations import DatabaseOperations

# Rows (counted over all tables, each up to this many) up to which deleting is the cheaper.
DELETE_UP_TO_ROWS = 2000


def rows_up_to(ops: DatabaseOperations, tables: Sequence[str], limit: int) -> int:
    """The rows in ``tables``, each table counted up to ``limit + 1`` (one statement)."""
    counts = " + ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM {ops.quote_name(t)} LIMIT {limit + 1}) AS r)"
        for t in tables
    )
    with ops.connection.cursor() as cursor:
        cursor.execute(f"SELECT {counts}")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _flush_sql(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    def sql_flush(
        ops: DatabaseOperations,
        style: Any,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if (
            not tables
            or reset_sequences
            or allow_cascade
            or rows_up_to(ops, tables, DELETE_UP_TO_ROWS) > DELETE_UP_TO_ROWS
        ):
            return original(
                ops, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        # Deferred foreign keys are checked at the commit, when every table is empty.
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {ops.quote_name(t)};" for t in tables
        ]

    return sql_flush


@contextmanager
def deleting_flush() -> Iterator[None]:
    """While open, a test database flush deletes few rows instead of truncating."""
    original = DatabaseOperations.sql_flush
    DatabaseOperations.sql_flush = _flush_sql(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = original  # type: ignore[method-assign]
