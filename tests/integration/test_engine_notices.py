"""Dead-letter notices never hold up the engine: with the broker that takes them hung, the
engine keeps its partition leases and keeps firing timers."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.notices import DeadLetterNotices
from beat_engine.redis_leases import LEASE_KEY
from jobs.models import DeadLetter, Job, JobRun
from jobs.states import RunState
from tests.support.beat_nodes import make_engine, pause_s
from tests.support.factories import T0, job_factory, running_run_factory
from tests.support.stalling import StallingServer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEASE_TTL_S = 2.0


@pytest.fixture
def hung_notice_broker() -> Iterator[StallingServer]:
    """Celery's producer connections (dead-letter notices) go to a server that never answers;
    the engine's run messages and leases use their own Redis clients and are unaffected."""
    from scheduler_project.celery import app

    with StallingServer() as server:
        before = app.conf.get("broker_write_url")
        pools = (app._pool, app.amqp._producer_pool)
        app.conf.broker_write_url = server.redis_url
        app._pool, app.amqp._producer_pool = None, None
        try:
            yield server
        finally:
            if app._pool is not None:
                app._pool.force_close_all()
            app.conf.broker_write_url = before
            app._pool, app.amqp._producer_pool = pools


def _expired_last_attempt(job: Job, second: int) -> JobRun:
    return running_run_factory(job, scheduled_for=T0 + timedelta(seconds=second), lease_until=T0)


def _dead(*runs: JobRun) -> bool:
    return JobRun.objects.filter(id__in=[r.id for r in runs], state=RunState.DEAD).count() == len(
        runs
    )


def test_hung_notice_broker_neither_stalls_lease_renewal_nor_timers(
    redis_client: redis.Redis, hung_notice_broker: StallingServer
) -> None:
    job = job_factory(interval=timedelta(hours=1), max_attempts=1)
    first = [_expired_last_attempt(job, second) for second in range(3)]
    engine = make_engine(SystemClock(), lease_ttl_s=LEASE_TTL_S, lease_renew_s=0.5)
    stop = threading.Event()

    def run_engine() -> None:
        try:
            engine.run(stop)
        finally:
            connection.close()  # this thread's session, or the test database cannot be dropped

    thread = threading.Thread(target=run_engine, name="engine", daemon=True)
    thread.start()
    try:
        wait_until(lambda: _dead(*first), timeout_s=30, what="the first runs dead-lettered")
        wait_until(
            lambda: hung_notice_broker.connections > 0, timeout_s=30, what="a notice being sent"
        )
        # Several lease TTLs with the notices stuck: a tick waiting for them lets leases lapse.
        pause_s(3 * LEASE_TTL_S)
        assert redis_client.get(LEASE_KEY.format(partition=job.partition)) == b"node-a"
        later = _expired_last_attempt(job, 10)
        wait_until(lambda: _dead(later), timeout_s=30, what="a later expired lease reaped")
        assert DeadLetter.objects.filter(job=job).count() == 4
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "shutdown waited for the hung notice broker"


def test_notices_beyond_the_bound_are_dropped_never_waited_for(
    hung_notice_broker: StallingServer,
) -> None:
    notices = DeadLetterNotices(capacity=2, close_wait_s=0.5)
    dead = [(uuid.uuid4(), uuid.uuid4(), 1, "lease expired") for _ in range(6)]
    notices.offer(dead, now=T0)
    # One may be in the sender's hands, stuck on the broker; two wait; the rest are dropped.
    assert notices.pending <= 2
    assert notices.dropped >= 3
    notices.close()
