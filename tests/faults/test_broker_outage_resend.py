"""Runs claimed while the broker is away are sent as soon as it is back, not a sweep later.

A push the broker refuses leaves its runs queued and unpublished in PostgreSQL (Redis is a
hint, docs/architecture.md, Invariants); the engine keeps them and sends them again, fenced
again, at its next resend. Here the sweep's period is an hour, so only that resend can send
them, and each run gets exactly one message.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from jobs.models import Job, JobRun
from scheduler_project.embedded import RedisServer
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


def test_runs_whose_push_failed_are_sent_once_the_broker_is_back(own_redis: RedisServer) -> None:
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(hours=1)) for _ in range(6)]
    Job.objects.filter(id__in=[j.id for j in jobs]).update(next_fire_at=T0 + timedelta(seconds=1))
    clock = FakeClock(T0)
    # Leases on the suite's Redis; the broker on one of the test's own, which goes away.
    engine = make_engine(clock, broker_url=own_redis.url, publish_sweep_after_s=3600.0)
    engine.tick()
    own_redis.stop()
    for _ in range(3):  # claimed while the broker is away; each resend fails too
        clock.advance(timedelta(seconds=1))
        engine.tick()
    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == len(jobs)
    assert not runs.filter(published_at__isnull=False).exists()
    assert engine._outbox.unsent == len(jobs)

    own_redis.start()
    clock.advance(timedelta(seconds=1))
    engine.tick()
    engine.tick()  # the second tick writes the published marks

    broker = redis.Redis.from_url(own_redis.url)
    sent = sorted(message_args(m)[0] for m in broker_messages(broker))
    assert sent == sorted(str(r.id) for r in runs)  # each run once, none twice
    assert not runs.filter(published_at__isnull=True).exists()
    assert engine._outbox.unsent == 0
