"""A contended queue: one worker slot, a backlog of mixed priorities waiting in the broker.

The runs start highest priority first (0 before 1 before 2 before 5), one priority list per
level, and a tenth of the starts (SCHEDULER_LOW_PRIORITY_SHARE=0.1) go to the lowest priority
waiting (9), which strict order would leave for last.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

from beat_engine.publisher import Publisher, QueuedRun
from jobs.models import JobRun
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import CeleryWorker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUEUE = "priorities"
SHARE = 0.1
# 28 runs above the lowest priority and 6 at it: the first 30 starts hold 3 reserved turns
# and the lowest never runs out before them.
BACKLOG = [0] * 10 + [1] * 6 + [2] * 6 + [5] * 6 + [9] * 6
FIRST = 30


@pytest.fixture
def started_order(redis_client: redis.Redis, tmp_path: Any, django_db_blocker: Any) -> list[int]:
    """Priorities of the backlog's runs in the order the worker started them."""
    tenant = tenant_factory()
    priorities = list(BACKLOG)
    # Pushed in an order of their own, so that arrival order says nothing about priority.
    random.Random(14).shuffle(priorities)
    runs: list[QueuedRun] = []
    for index, priority in enumerate(priorities):
        job = job_factory(tenant, name=f"prio-{index}", priority=priority, queue=QUEUE)
        run = run_factory(job, state=RunState.QUEUED, attempt=1, queued_at=T0, due_at=T0)
        runs.append(QueuedRun(run.id, 1, run.partition, QUEUE, priority))
    # The whole backlog waits in the broker before the worker's first pop.
    Publisher(redis_client, origin="test").push(runs, {})
    env = {**worker_env(allowlist=[]), "SCHEDULER_LOW_PRIORITY_SHARE": str(SHARE)}
    worker = CeleryWorker([QUEUE], env, tmp_path / "worker.log", concurrency=1)
    worker.start()
    try:
        wait_until(
            lambda: (
                JobRun.objects.filter(state=RunState.SUCCEEDED, job__queue=QUEUE).count()
                == len(runs)
            ),
            timeout_s=60,
            what="the worker to run the backlog",
        )
    except AssertionError:
        raise AssertionError(worker.log_tail()) from None
    finally:
        worker.stop()
    started = JobRun.objects.filter(job__queue=QUEUE).order_by("started_at")
    return [run.job.priority for run in started.select_related("job")]


def test_high_priority_starts_first_and_the_lowest_gets_its_reserved_share(
    started_order: list[int],
) -> None:
    assert sorted(started_order) == sorted(BACKLOG)
    first = started_order[:FIRST]
    # The reserved share: 3 of the first 30 starts went to the lowest priority waiting.
    assert first.count(9) == int(SHARE * FIRST), first
    # Every other start took the highest priority waiting: 0, then 1, then 2, then 5.
    others = [p for p in first if p != 9]
    assert others == sorted(others), first
    assert others == [0] * 10 + [1] * 6 + [2] * 6 + [5] * 5, first
