"""Messages the engine pushes into Redis are consumed by a stock Celery worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from django.conf import settings

from jobs.models import JobRun
from tests.support.beat_nodes import ROOT, make_engine
from tests.support.celery_probe import RECEIVED_KEY
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def probe_worker(redis_client: redis.Redis) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, REDIS_URL=settings.REDIS_URL)
    cmd = [
        sys.executable, "-m", "celery", "-A", "tests.support.celery_probe", "worker",
        "-Q", "scheduler", "--pool", "solo", "--without-mingle", "--without-gossip",
        "--without-heartbeat", "--loglevel", "WARNING",
    ]  # fmt: skip
    worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    yield worker
    worker.terminate()
    worker.wait(timeout=30)


def test_stock_celery_worker_runs_published_messages_at_every_priority(
    redis_client: redis.Redis, probe_worker: subprocess.Popen[bytes]
) -> None:
    tenant = tenant_factory()
    # Priorities 0, 5 and 9 land in three different kombu priority lists of the queue.
    jobs = [job_factory(tenant, interval=timedelta(seconds=10), priority=p) for p in (0, 5, 9)]
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    clock.advance(timedelta(seconds=10))
    engine.tick()
    expected = {(str(run.id), 1) for run in JobRun.objects.filter(job__in=jobs)}
    assert len(expected) == 3

    def received() -> set[tuple[str, int]]:
        return {tuple(json.loads(raw)) for raw in redis_client.lrange(RECEIVED_KEY, 0, -1)}  # type: ignore[misc]

    wait_until(lambda: received() == expected, timeout_s=60, what="the worker to run 3 tasks")
    assert probe_worker.poll() is None
