"""Deferred published marks: taken off the claim path while claims are due, yet every pushed
run is marked with its push instant and the sweep does not publish it again. Written oldest
first, a bounded number a tick, so that the marks of a spike pushed at once never stall the
loop; all of them once the oldest is mark_within_s old."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from beat_engine import outbox as outbox_module
from beat_engine.engine import BeatEngine
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


INSTANT = T0 + timedelta(minutes=1)
JOBS = 7


def _marked() -> int:
    return JobRun.objects.filter(published_at__isnull=False).count()


def _pushed_at_the_instant(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, BeatEngine]:
    """JOBS firings claimed ahead and pushed at INSTANT, at most 3 marks a tick."""
    monkeypatch.setattr(outbox_module, "_MARKS_PER_TICK", 3)
    for _ in range(JOBS):
        job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_ahead_s=10.0, lookahead_s=30.0, mark_delay_s=1.0)
    clock.advance(INSTANT - timedelta(seconds=5) - clock.now())
    engine.tick()
    assert JobRun.objects.count() == JOBS
    clock.advance(INSTANT - clock.now())
    engine.tick()
    return clock, engine


def test_marks_of_runs_pushed_at_once_are_written_a_bounded_number_a_tick(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clock, engine = _pushed_at_the_instant(monkeypatch)

    assert len(broker_messages(redis_client)) == JOBS
    assert _marked() == 3
    engine.tick()
    assert _marked() == 6
    engine.tick()
    assert _marked() == JOBS
    assert set(JobRun.objects.values_list("published_at", flat=True)) == {INSTANT}
    engine.shutdown()


def test_every_mark_is_written_once_the_oldest_is_mark_within_s_old(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, engine = _pushed_at_the_instant(monkeypatch)
    assert _marked() == 3

    clock.advance(timedelta(seconds=1))
    engine.tick()

    assert _marked() == JOBS
    engine.shutdown()


def test_shutdown_writes_every_mark_left(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clock, engine = _pushed_at_the_instant(monkeypatch)
    assert _marked() == 3

    engine.shutdown()

    assert _marked() == JOBS
