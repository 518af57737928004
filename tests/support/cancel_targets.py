"""Targets for the cancel tests, loaded by their workers through SCHEDULER_CLIENT_MODULES."""

from __future__ import annotations

import time
from typing import Any

from jobs.registry import register_callable
from jobs.targets import RunContext


@register_callable("tests.fail_later")
def fail_later(context: RunContext) -> dict[str, Any]:
    """Works for a while without looking at cancellation, then fails with a retryable error."""
    time.sleep(float(context.payload.get("seconds", 1)))
    raise RuntimeError(f"failed after working (attempt {context.attempt})")


@register_callable("tests.ignore_cancel")
def ignore_cancel(context: RunContext) -> dict[str, Any]:
    """Ignores cancellation, so its worker is still holding the attempt when it is killed."""
    time.sleep(float(context.payload.get("seconds", 60)))
    return {"attempt": context.attempt}
