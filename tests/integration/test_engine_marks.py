"""Deferred published marks: taken off the claim path while claims are due, yet every pushed
run is marked with its push instant and the sweep does not publish it again."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from beat_engine.sweep import sweep_lost_publishes
from jobs.models import JobRun
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_marks_wait_while_claims_are_due_then_carry_the_push_instant(
    redis_client: redis.Redis,
) -> None:
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(seconds=60)) for _ in range(6)]
    clock = FakeClock(T0)
    # Two firings per tick: the first tick leaves claims due, so its marks wait.
    engine = make_engine(clock, claim_batch=2, max_claims_per_tick=2, mark_delay_s=5.0)
    engine.tick()
    clock.advance(timedelta(seconds=60))
    pushed_at = clock.now()
    assert engine.tick() == 0.0

    assert len(broker_messages(redis_client)) == 2
    assert not JobRun.objects.filter(published_at__isnull=False).exists()

    clock.advance(timedelta(seconds=1))
    engine.tick()
    clock.advance(timedelta(seconds=1))
    engine.tick()

    runs = JobRun.objects.filter(job__in=jobs)
    assert len(broker_messages(redis_client)) == 6 == runs.count()
    assert all(r.published_at is not None for r in runs)
    first = sorted(runs, key=lambda r: r.published_at or T0)[:2]
    assert [r.published_at for r in first] == [pushed_at, pushed_at]
    assert [r.lateness for r in first] == [timedelta(0), timedelta(0)]

    later = clock.now() + timedelta(seconds=engine.config.publish_sweep_after_s + 1)
    partitions = sorted({j.partition for j in jobs})
    assert (
        sweep_lost_publishes(
            partitions,
            now=later,
            unpublished_after=timedelta(seconds=engine.config.publish_sweep_after_s),
            republish_after=timedelta(seconds=engine.config.republish_after_s),
            limit=100,
        )
        == []
    )


def test_marks_are_written_within_mark_delay_even_while_claims_stay_due(
    redis_client: redis.Redis,
) -> None:
    tenant = tenant_factory()
    job_factory(tenant, interval=timedelta(seconds=60))
    for _ in range(5):
        job_factory(tenant, interval=timedelta(seconds=60))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=1, max_claims_per_tick=1, mark_delay_s=1.0)
    engine.tick()
    clock.advance(timedelta(seconds=60))
    engine.tick()
    assert not JobRun.objects.filter(published_at__isnull=False).exists()
    clock.advance(timedelta(seconds=1))
    # Still busy (claims due) but the oldest mark has waited mark_delay_s.
    assert engine.tick() == 0.0
    assert JobRun.objects.filter(published_at__isnull=False).count() == 2


def test_shutdown_marks_what_it_pushed(redis_client: redis.Redis) -> None:
    tenant = tenant_factory()
    for _ in range(3):
        job_factory(tenant, interval=timedelta(seconds=60))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=1, max_claims_per_tick=1)
    engine.tick()
    clock.advance(timedelta(seconds=60))
    engine.tick()
    engine.shutdown()
    assert list(JobRun.objects.values_list("state", "published_at")) == [
        (RunState.QUEUED, T0 + timedelta(seconds=60))
    ]
