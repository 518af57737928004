"""Claims on real PostgreSQL and Redis: one run per firing, fencing, catch-up, one-offs."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import redis

from beat_engine.claims import claim_due_batch
from beat_engine.fencing import epoch_take
from beat_engine.heap import DueEntry
from jobs.models import Job, JobRun, JobStatus, PartitionEpoch
from jobs.services.dedup import dedup_key_for
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _entry(job: Job) -> DueEntry:
    assert job.next_fire_at is not None
    return DueEntry(job.next_fire_at, job.id, job.partition)


def test_due_cron_job_gets_one_queued_published_run_and_advances(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    assert len(engine.leases) == 64
    clock.advance(timedelta(minutes=1, seconds=1))
    engine.tick()

    run = JobRun.objects.get(job=job)
    assert run.state == RunState.QUEUED
    assert run.scheduled_for == T0 + timedelta(minutes=1)
    assert run.attempt == 1
    assert run.epoch == engine.leases[job.partition].epoch
    assert run.dedup_key == dedup_key_for(job.id, run.scheduled_for)
    assert run.published_at == clock.now()
    assert run.lateness == timedelta(seconds=1)
    job.refresh_from_db()
    assert job.next_fire_at == T0 + timedelta(minutes=2)
    assert job.last_fire_at == T0 + timedelta(minutes=1)
    messages = broker_messages(redis_client)
    assert [message_args(m) for m in messages] == [[str(run.id), 1]]
    assert messages[0]["headers"]["task"] == "jobs.execute_run"


def test_one_off_job_completes_after_its_firing(redis_client: redis.Redis) -> None:
    job = job_factory(run_at=T0 + timedelta(seconds=30))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    clock.advance(timedelta(seconds=30))
    engine.tick()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.next_fire_at is None
    assert JobRun.objects.filter(job=job, state=RunState.QUEUED).count() == 1


def test_two_claimers_with_the_same_epoch_create_one_run_per_firing(
    redis_client: redis.Redis,
) -> None:
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(seconds=10)) for _ in range(200)]
    epochs = {p: epoch_take(partition=p, node="n", now=T0) for p in {j.partition for j in jobs}}
    now = T0 + timedelta(seconds=10)
    entries = [_entry(j) for j in jobs]
    barrier = threading.Barrier(2)
    results = []

    def claim() -> None:
        from django.db import connection

        barrier.wait()
        results.append(claim_due_batch(entries, epochs=epochs, now=now))
        connection.close()

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert JobRun.objects.count() == 200
    assert sum(len(r.queued) for r in results) == 200
    assert set(JobRun.objects.values_list("scheduled_for", flat=True)) == {now}


def test_fenced_out_claim_writes_and_dispatches_nothing(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(seconds=10))
    clock = FakeClock(T0)
    stale = make_engine(clock, "stale")
    stale.tick()
    # Another node takes the partition's epoch (as after a lease expiry): the stale node's
    # Redis view still says it owns the partition.
    epoch_take(partition=job.partition, node="newer", now=T0)
    clock.advance(timedelta(seconds=10))
    stale.tick()
    assert not JobRun.objects.exists()
    assert broker_messages(redis_client) == []
    assert job.partition not in stale.leases
    job.refresh_from_db()
    assert job.next_fire_at == T0 + timedelta(seconds=10)


def test_redis_flush_neither_lets_a_stale_node_through_nor_fences_everyone_out(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(seconds=10))
    clock = FakeClock(T0)
    first = make_engine(clock, "first")
    first.tick()
    old_epoch = first.leases[job.partition].epoch
    redis_client.flushall()
    # A second node sees an empty Redis and takes every lease: new epochs come from Postgres.
    second = make_engine(clock, "second")
    second.tick()
    assert second.leases[job.partition].epoch > old_epoch
    clock.advance(timedelta(seconds=10))
    # The first node still believes in its old lease (no renewal yet): the database refuses it.
    result = claim_due_batch([_entry(job)], epochs={job.partition: old_epoch}, now=clock.now())
    assert result.fenced_out is not None
    assert not JobRun.objects.exists()
    second.tick()
    run = JobRun.objects.get(job=job)
    assert run.epoch == PartitionEpoch.objects.get(partition=job.partition).epoch
