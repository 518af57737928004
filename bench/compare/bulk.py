"""Bulk registration by SQL: many copies of one row the ORM created, so constraints and
defaults are the model's own while a million rows take seconds rather than minutes."""

from __future__ import annotations

from typing import Any


def insert_copies(
    cursor: Any,
    table: str,
    columns: list[str],
    template_pk: object,
    overrides: dict[str, str],
    source: str,
    params: list[object],
) -> None:
    """``INSERT INTO table SELECT`` one row per row of ``source`` (SQL aliased ``g``), each
    a copy of the template row ``t`` but for the ``overrides`` (column -> SQL expression)."""
    select = ", ".join(overrides.get(c, f't."{c}"') for c in columns)
    names = ", ".join(f'"{c}"' for c in columns)
    cursor.execute(
        f'INSERT INTO "{table}" ({names}) SELECT {select} FROM "{table}" t, {source} '
        f"WHERE t.id = %s",
        [*params, template_pk],
    )


def entry_name_sql(index: str) -> str:
    """SQL for ``register.entry_name``: job-0000042 for index 42."""
    return f"'job-' || lpad(({index})::text, 7, '0')"
