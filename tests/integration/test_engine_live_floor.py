"""The live floor (beat_engine/live_floor.py): the timer pass and the sweep read only the days
from the oldest live run on, and a run revived further back is fired once the floor is read
again, never lost."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
from django.db import transaction

from beat_engine.live_floor import READ_EVERY_S
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

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OLD = T0 - timedelta(days=40)
DAYS = [OLD.date(), (T0 - timedelta(days=1)).date(), T0.date()]


@pytest.fixture
def day_partitions() -> Iterator[None]:
    partitions_ensure(DAYS)
    yield
    JobRun.objects.all().delete()
    drop_day_partitions(DAYS)


def test_a_live_run_older_than_recent_days_lowers_the_floor_and_is_fired(
    redis_client: redis.Redis, day_partitions: None
) -> None:
    job = job_factory(interval=timedelta(days=365))
    run = run_factory(job, scheduled_for=OLD, state=RunState.RETRY_WAIT, attempt=1,
                      due_at=T0 + timedelta(seconds=1))  # fmt: skip
    assert oldest_live_firing([job.partition]) == OLD
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()  # reads the floor: the old run is live, so the floor is its firing
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
    # A replay or backfill 40 days back, due now: below the floor.
    run = run_factory(job, scheduled_for=OLD, state=RunState.PENDING, due_at=T0)
    clock.advance(timedelta(seconds=1))
    engine.tick()
    # Bounded: the pass did not read the run's day (the floor is what was measured to save).
    assert JobRun.objects.get(id=run.id).state == RunState.PENDING
    clock.advance(timedelta(seconds=READ_EVERY_S))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 1)


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

    assert old in touched(None)
    assert old not in touched(T0 - timedelta(days=2))
