"""The failover benchmark's target: one row per execution, so the bench counts effects."""

from __future__ import annotations

from typing import Any

from django.db import connection

from jobs.registry import register_callable

EFFECTS_TABLE = "bench_failover_effects"


def ensure_effects_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} (key text, attempt int)")
        cursor.execute(f"TRUNCATE {EFFECTS_TABLE}")


@register_callable("bench.effect")
def effect(context: Any) -> None:
    # Committed at once (autocommit): a second execution of a firing shows as a second row.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {EFFECTS_TABLE} (key, attempt) VALUES (%s, %s)",
            [context.idempotency_key, context.attempt],
        )
