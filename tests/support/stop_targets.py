"""Targets of the worker-stop fault test (loaded in the worker via SCHEDULER_CLIENT_MODULES)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import transaction

from jobs.registry import register_callable
from jobs.targets import RunContext
from tests.support.targets import _effect


def _effect_with_key(context: RunContext, note: str) -> None:
    # The effect and the firing's key commit together: a second execution of a firing whose
    # effect happened is refused (AlreadyDone), so a row here is an effect that happened.
    with transaction.atomic():
        context.record_key()
        _effect(context.idempotency_key, context.attempt, note)


@register_callable("tests.stop.long_first_attempt", records_own_key=True)
def long_first_attempt(context: RunContext) -> dict[str, Any]:
    """Attempt 1 works until told to stop (at most 120 s) and then leaves no effect; a later
    attempt has its effect at once."""
    if context.attempt == 1 and context.cancelled.wait(120):
        return {"stopped": True}
    _effect_with_key(context, "done")
    return {"attempt": context.attempt}


@register_callable("tests.stop.until_released", records_own_key=True)
def until_released(context: RunContext) -> dict[str, Any]:
    """Works until the file named in the payload exists, then has its effect."""
    release = Path(str(context.payload["release"]))
    while not release.exists():
        if context.cancelled.wait(0.05):
            return {"stopped": True}
    _effect_with_key(context, "released")
    return {"attempt": context.attempt}
