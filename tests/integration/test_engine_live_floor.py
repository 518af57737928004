"""The live floor (beat_engine/live_floor.py): the timer pass and the sweep read only the days
from the oldest live run on, the floor is read off the tick's thread, and a run revived
further back is fired once the floor is read again, never lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
from django.db import connection, connections, transaction

from beat_engine.engine import BeatEngine
from beat_engine.live_floor import READ_EVERY_S, RECENT
from beat_engine.sweep import sweep_lost_publishes
from beat_engine.timers import fire_timers, oldest_live_firing
from jobs.models import JobRun
from jobs.run_partitions import RUN_TABLE, partition_name
from jobs.services.history_partitions import partitions_ensure
from jobs.states import RunState
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, run_factory
from tests.support.partition_reads import drop_day_partitions, partitions_touched
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OLD = T0 - timedelta(days=40)
DAYS = [OLD.date(), (T0 - timedelta(days=1)).date(), T0.date()]


@pytest.fixture
def day_partitions() -> Iterator[None]:
    partitions_ensure(DAYS)
    yield
    JobRun.objects.all().delete()
    drop_day_partitions(DAYS)


def wait_for_floor_reads(engine: BeatEngine, reads: int) -> None:
    """The floor is read on its own thread: wait until it has been read ``reads`` times."""
    wait_until(lambda: engine._floor_reader.passes >= reads, what="the live floor's read")


def test_a_live_run_older_than_recent_days_lowers_the_floor_and_is_fired(
    redis_client: redis.Redis, day_partitions: None
) -> None:
    job = job_factory(interval=timedelta(days=365))
    run = run_factory(job, scheduled_for=OLD, state=RunState.RETRY_WAIT, attempt=1,
                      due_at=T0 + timedelta(seconds=1))  # fmt: skip
    assert oldest_live_firing() == OLD
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()  # asks for the floor: the old run is live, so the floor is its firing
    wait_for_floor_reads(engine, 1)
    assert engine._live_floor.since(clock.monotonic()) == OLD
    clock.advance(timedelta(seconds=1))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 2)


def test_a_run_revived_below_the_floor_is_fired_when_the_floor_is_read_again(
    redis_client: redis.Redis, day_partitions: None
) -> None:
    job = job_factory(interval=timedelta(days=365))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()  # no live run: the floor is two days back
    wait_for_floor_reads(engine, 1)
    assert engine._live_floor.since(clock.monotonic()) == T0 - RECENT
    # A replay or backfill 40 days back, due now: below the floor.
    run = run_factory(job, scheduled_for=OLD, state=RunState.PENDING, due_at=T0)
    clock.advance(timedelta(seconds=1))
    engine.tick()
    # Bounded: the pass did not read the run's day (the floor is what was measured to save).
    assert JobRun.objects.get(id=run.id).state == RunState.PENDING
    clock.advance(timedelta(seconds=READ_EVERY_S))
    engine.tick()  # asks for the floor again; this pass still has the old one
    wait_for_floor_reads(engine, 2)
    assert engine._live_floor.since(clock.monotonic()) == OLD
    clock.advance(timedelta(seconds=1))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 1)


def test_the_tick_never_waits_for_the_floor_read(
    redis_client: redis.Redis, day_partitions: None
) -> None:
    """An old day partition locked by another session holds the floor's read (unbounded), and
    the ticks go on meanwhile, with the floor they have, over the recent days only."""
    job = job_factory(interval=timedelta(days=365))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    wait_for_floor_reads(engine, 1)
    run = run_factory(job, scheduled_for=T0, state=RunState.PENDING, due_at=T0)
    old = partition_name(RUN_TABLE, OLD.date())
    locker = connections.create_connection("default")
    try:
        with locker.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"LOCK TABLE {old} IN ACCESS EXCLUSIVE MODE")
        clock.advance(timedelta(seconds=READ_EVERY_S))
        ticked = threading.Event()

        def ticks() -> None:
            try:
                engine.tick()  # asks for the read, which the lock holds
                clock.advance(timedelta(seconds=1))
                engine.tick()
                ticked.set()
            finally:
                connection.close()

        ticker = threading.Thread(target=ticks, daemon=True)
        ticker.start()
        assert ticked.wait(20.0), "a tick waited for the floor's read"
        assert engine._floor_reader.passes == 1  # the second read is still held by the lock
        run.refresh_from_db()
        assert run.state == RunState.QUEUED
    finally:
        with locker.cursor() as cursor:
            cursor.execute("ROLLBACK")
        locker.close()
    wait_for_floor_reads(engine, 2)


def test_a_bounded_timer_pass_reads_no_partition_older_than_the_floor(
    redis_client: redis.Redis, day_partitions: None
) -> None:
    job = job_factory(interval=timedelta(days=365))
    run_factory(
        job, scheduled_for=OLD, state=RunState.SUCCEEDED, due_at=None, finished_at=OLD, attempt=1
    )
    engine = make_engine(FakeClock(T0))
    engine.tick()  # takes the partitions: the fence then lets the passes through
    epochs = {partition: lease.epoch for partition, lease in engine.leases.items()}
    old = partition_name(RUN_TABLE, OLD.date())
    recent = partition_name(RUN_TABLE, T0.date())

    def touched(since: datetime | None) -> set[str]:
        # One transaction: the scans counted are this pass's (pg_stat_xact_user_tables).
        with transaction.atomic():
            return partitions_touched(lambda: fire_timers(epochs, now=T0, limit=100, since=since))

    assert old in touched(None)
    bounded = touched(T0 - timedelta(days=2))
    assert old not in bounded
    assert recent in bounded


def test_a_bounded_sweep_reads_no_partition_older_than_the_floor(day_partitions: None) -> None:
    job = job_factory(interval=timedelta(days=365))
    old = partition_name(RUN_TABLE, OLD.date())

    def touched(since: datetime | None) -> set[str]:
        with transaction.atomic():
            return partitions_touched(
                lambda: sweep_lost_publishes(
                    [job.partition], now=T0, unpublished_after=timedelta(0),
                    republish_after=timedelta(0), limit=100, since=since,
                )
            )  # fmt: skip

    assert old not in touched(T0 - timedelta(days=2))
    assert old in touched(None)
