"""Targets the execution tests run in a real worker (loaded there via SCHEDULER_CLIENT_MODULES)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from celery import shared_task
from django.db import connection, transaction

from jobs.decorators import idempotent
from jobs.registry import register_callable
from jobs.targets import RunContext

SIDE_EFFECTS_TABLE = "test_side_effects"


def ensure_side_effects_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {SIDE_EFFECTS_TABLE} (key text, attempt int, note text)"
        )
        cursor.execute(f"TRUNCATE {SIDE_EFFECTS_TABLE}")


def side_effects() -> list[tuple[str, int, str]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, attempt, note FROM {SIDE_EFFECTS_TABLE} ORDER BY attempt")
        return [(str(r[0]), int(r[1]), str(r[2])) for r in cursor.fetchall()]


def _effect(key: str, attempt: int, note: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {SIDE_EFFECTS_TABLE} (key, attempt, note) VALUES (%s, %s, %s)",
            [key, attempt, note],
        )


@register_callable("tests.echo")
def echo(context: RunContext) -> dict[str, Any]:
    return {"context": context.as_dict(), "payload": context.payload}


@register_callable("tests.nap")
def nap(context: RunContext) -> dict[str, Any]:
    # Long enough that a killed worker is caught mid-run; returns early when cancelled.
    context.cancelled.wait(float(context.payload.get("seconds", 0.3)))
    return {"attempt": context.attempt}


@register_callable("tests.flaky")
def flaky(context: RunContext) -> dict[str, Any]:
    if context.attempt < int(context.payload.get("succeed_on", 2)):
        raise RuntimeError(f"flaky failure on attempt {context.attempt}")
    return {"succeeded_on": context.attempt}


@register_callable("tests.always_fails")
def always_fails(context: RunContext) -> None:
    raise RuntimeError(f"always fails (attempt {context.attempt})")


@register_callable("tests.block")
def block(context: RunContext) -> dict[str, Any]:
    """Cooperative: stops as soon as the context says it was cancelled."""
    stopped = context.cancelled.wait(float(context.payload.get("max_s", 60)))
    return {"stopped": stopped}


@register_callable("tests.gate")
def gate(context: RunContext) -> dict[str, Any]:
    """Runs until the test opens its gate: a side-effects row keyed by the run's id with note
    'open' (open_gate). Cooperative; gives up after max_s."""
    for _ in range(int(float(context.payload.get("max_s", 60)) / 0.02)):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {SIDE_EFFECTS_TABLE} WHERE key = %s AND note = 'open'",
                [str(context.run_id)],
            )
            if cursor.fetchone() is not None:
                return {"opened": True}
        if context.cancelled.wait(0.02):
            break
    return {"opened": False}


def open_gate(run_id: object) -> None:
    _effect(str(run_id), 0, "open")


@register_callable("tests.stubborn")
def stubborn(context: RunContext) -> dict[str, Any]:
    """Ignores cancellation: the worker must give up on it after the grace period."""
    time.sleep(float(context.payload.get("sleep_s", 20)))
    return {"finished": True}


@register_callable("tests.effect_then_nap")
def effect_then_nap(context: RunContext) -> dict[str, Any]:
    """Leaves one row per execution (committed at once), then works for a while: a second
    execution of the same firing shows as a second row."""
    _effect(context.idempotency_key, context.attempt, f"pid {os.getpid()}")
    context.cancelled.wait(float(context.payload.get("seconds", 5)))
    return {"attempt": context.attempt, "pid": os.getpid()}


@register_callable("tests.block_first_attempt")
def block_first_attempt(context: RunContext) -> dict[str, Any]:
    if context.attempt == 1:
        time.sleep(60)
    return {"attempt": context.attempt}


@register_callable("tests.own_key_effect", records_own_key=True)
def own_key_effect(context: RunContext) -> dict[str, Any]:
    """The effect and the firing's key commit together; then, on the chosen attempt, the worker
    process dies before it can record the outcome (a forced redelivery)."""
    with transaction.atomic():
        context.record_key()
        _effect(context.idempotency_key, context.attempt, "own-key")
    if context.payload.get("crash_on_attempt") == context.attempt:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"effect": True}


@shared_task(name="tests.task_target")
def task_target(payload: Any, scheduler_context: dict[str, Any]) -> dict[str, Any]:
    return {"payload": payload, "scheduler_context": scheduler_context}


@idempotent(key=lambda order_id: f"order-{order_id}")
def charge_order(order_id: int) -> str:
    _effect(f"order-{order_id}", 1, "charged")
    return "charged"
