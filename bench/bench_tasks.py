"""Targets for bench_executor: the same no-op, as a scheduler callable and as a bare Celery task."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from jobs.notify import redis_client
from jobs.registry import register_callable

BARE_DONE_KEY = "bench:bare:done"


@register_callable("bench.noop")
def noop(context: Any) -> None:
    return None


@shared_task(name="bench.bare_noop", ignore_result=True, acks_late=True)
def bare_noop() -> None:
    noop(None)
    # The only way the bench can see a bare task finish without a result backend.
    redis_client().incr(BARE_DONE_KEY)
