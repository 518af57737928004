"""A steady stream of due firings: the claim loop must still renew leases and publish at once.

Regression for the steady-rate benchmark's 30 s outlier: with a firing due every few
milliseconds, the claim loop (bounded only by a count) always found something due and ran
past the lease TTL; the leases lapsed locally, the publish step treated the claim's partitions
as fenced and skipped their committed runs, and only the sweep published them 30 s later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import redis
from django.db.models import F, Max

from jobs.models import Job, JobRun, PartitionEpoch, Tenant
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class SteppingClock(FakeClock):
    """Time moves on by ``step`` every time the engine reads it, as real work takes time."""

    step = timedelta(0)

    def now(self) -> datetime:
        self.advance(self.step)
        return super().now()


def _due_every(jobs: list[Job], start: datetime, spacing: timedelta) -> None:
    for i, job in enumerate(jobs):
        Job.objects.filter(id=job.id).update(next_fire_at=start + i * spacing)


def test_stream_of_due_firings_keeps_leases_and_publishes_every_run_at_once(
    redis_client: redis.Redis,
) -> None:
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(hours=1)) for _ in range(400)]
    # One firing due every 10 ms for 4 s: twice the (shortened) lease TTL.
    _due_every(jobs, T0 + timedelta(seconds=1), timedelta(milliseconds=10))
    clock = SteppingClock(T0)
    engine = make_engine(clock, lease_ttl_s=2.0, lease_renew_s=0.6, publish_sweep_after_s=30.0)
    engine.tick()
    assert len(engine.leases) == 64
    clock.step = timedelta(milliseconds=20)
    while clock.now() < T0 + timedelta(seconds=6):
        clock.sleep(engine.tick())

    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == 400
    assert not runs.filter(published_at__isnull=True).exists(), "runs left for the sweep"
    worst = runs.aggregate(worst=Max(F("published_at") - F("due_at")))["worst"]
    assert worst < timedelta(seconds=1)
    # The leases were renewed, never lapsed and re-taken: every epoch is still the first.
    assert set(PartitionEpoch.objects.values_list("epoch", flat=True)) == {1}


def test_a_tenant_with_many_due_jobs_does_not_starve_another_in_the_first_batch(
    redis_client: redis.Redis,
) -> None:
    big, small = tenant_factory(), tenant_factory()
    crowd = [job_factory(big, interval=timedelta(hours=1)) for _ in range(12)]
    lone = job_factory(small, interval=timedelta(hours=1))
    # The lone job is due last of all: in plain due order it would be in the last batch.
    _due_every([*crowd, lone], T0 + timedelta(seconds=1), timedelta(milliseconds=1))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=4, max_claims_per_tick=4)
    engine.tick()
    clock.advance(timedelta(seconds=2))
    engine.tick()  # claims one batch of four only
    assert JobRun.objects.filter(job=lone, state=RunState.QUEUED).count() == 1
    assert JobRun.objects.filter(job__in=crowd).count() == 3
    for _ in range(4):
        engine.tick()
    assert JobRun.objects.filter(job__in=crowd).count() == 12


def test_tenant_at_max_queued_runs_is_deferred_and_others_are_not(
    redis_client: redis.Redis,
) -> None:
    capped, other = tenant_factory(), tenant_factory()
    Tenant.objects.filter(id=capped.id).update(max_queued_runs=2)
    capped_jobs = [job_factory(capped, interval=timedelta(hours=1)) for _ in range(5)]
    other_job = job_factory(other, interval=timedelta(hours=1))
    _due_every([*capped_jobs, other_job], T0 + timedelta(seconds=1), timedelta(0))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    clock.advance(timedelta(seconds=2))
    engine.tick()
    assert JobRun.objects.filter(tenant=capped, state=RunState.QUEUED).count() == 2
    assert JobRun.objects.filter(job=other_job, state=RunState.QUEUED).count() == 1
    waiting = Job.objects.filter(id__in=[j.id for j in capped_jobs], next_fire_at__lte=clock.now())
    assert waiting.count() == 3, "deferred jobs keep their due firing, nothing is dropped"
    # Once the tenant's runs leave 'queued' (workers started them), the rest are claimed.
    JobRun.objects.filter(tenant=capped).update(
        state=RunState.RUNNING, started_at=T0, lease_until=T0 + timedelta(hours=1)
    )
    clock.advance(timedelta(seconds=2))
    engine.tick()
    assert JobRun.objects.filter(tenant=capped).count() == 4


def test_run_published_but_never_started_is_published_again_after_the_run_lease(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(hours=1))
    Job.objects.filter(id=job.id).update(next_fire_at=T0 + timedelta(seconds=1))
    clock = FakeClock(T0)
    engine = make_engine(clock, republish_after_s=60.0)
    engine.tick()
    clock.advance(timedelta(seconds=1))
    engine.tick()
    run = JobRun.objects.get(job=job)
    assert len(broker_messages(redis_client)) == 1
    redis_client.flushdb()  # the broker restarted without persistence
    clock.advance(timedelta(seconds=61))
    engine.tick()
    run.refresh_from_db()
    assert run.published_at == clock.now()
    assert [message_args(m) for m in broker_messages(redis_client)] == [[str(run.id), 1]]
