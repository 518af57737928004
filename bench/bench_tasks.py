"""Targets for bench_executor: the same work, as a scheduler target and as a bare Celery task.

The no-op is a registered callable (``bench.noop``) and the task ``bench.bare_noop``; the HTTP
call is an HTTP-target job's and the task ``bench.bare_http`` (the call a plain Celery task
makes, bench/plain_http.py, to the URL in BENCH_TARGET_URL)."""

from __future__ import annotations

import os
from typing import Any

from celery import shared_task

from bench.plain_http import post_firing
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


@shared_task(name="bench.bare_http", ignore_result=True, acks_late=True)
def bare_http(firing: str) -> None:
    post_firing(os.environ["BENCH_TARGET_URL"], firing)
    redis_client().incr(BARE_DONE_KEY)
