"""The heap holds every job whose next firing lies in the loaded horizon: a jittered due
instant past the horizon, a change notification, a stale entry or a failure after a claim
committed never leave a job out until a whole reload of its partition, a slice of the
partitions at each refresh (about every full_refresh_s, 60 s)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from beat_engine import engine as engine_module
from beat_engine.engine import BeatEngine
from beat_engine.jitter import jitter_offset
from beat_engine.notifications import ChangeFeed
from jobs.models import Job, JobRun
from jobs.notify import notify_job_changed
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

INTERVAL = timedelta(seconds=30)  # the look-ahead's length (LOOKAHEAD_S)


def _window_for(job_id: uuid.UUID, low_s: float, high_s: float) -> tuple[timedelta, timedelta]:
    """A jitter window under INTERVAL whose offset for this job lies in [low_s, high_s)."""
    for seconds in range(int(low_s) + 1, int(INTERVAL.total_seconds())):
        window = timedelta(seconds=seconds)
        offset = jitter_offset(job_id, window)
        if timedelta(seconds=low_s) <= offset < timedelta(seconds=high_s):
            return window, offset
    raise AssertionError("no window gives this job an offset in range")  # pragma: no cover


def _jittered_job(low_s: float, high_s: float, *, next_fire_at: datetime) -> tuple[Job, timedelta]:
    job = job_factory(tenant_factory(), interval=INTERVAL, anchor_at=T0)
    window, offset = _window_for(job.id, low_s, high_s)
    Job.objects.filter(id=job.id).update(jitter_window=window, next_fire_at=next_fire_at)
    return job, offset


def _tick_until(engine: BeatEngine, clock: FakeClock, until: datetime) -> None:
    while clock.now() < until:
        clock.advance(timedelta(seconds=1))
        engine.tick()


def _fired(job: Job, scheduled_for: datetime) -> bool:
    return JobRun.objects.filter(job=job, scheduled_for=scheduled_for).exists()


def test_next_firing_of_a_jittered_job_is_kept_when_its_due_instant_passes_the_horizon(
    redis_client: redis.Redis,
) -> None:
    # Firings at T0 and T0+30 s, each dispatched `offset` later. The claim of the first comes
    # 1 s after a refresh, when the horizon reaches T0+offset+29: the next firing (T0+30) is
    # inside it, its jittered instant (T0+30+offset) is not, and no incremental refresh loads
    # a job whose next_fire_at is already behind loaded_until.
    job, offset = _jittered_job(6.0, 25.0, next_fire_at=T0)
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    clock.advance(offset - timedelta(seconds=1))
    engine.tick()  # a refresh: loaded until T0 + offset + 29 s
    clock.advance(timedelta(seconds=1))
    engine.tick()  # the claim of the first firing
    assert _fired(job, T0)

    second_due = T0 + INTERVAL + offset
    _tick_until(engine, clock, second_due + timedelta(seconds=1))
    assert clock.now() < T0 + timedelta(seconds=60), "before the full reload"
    assert _fired(job, T0 + INTERVAL), "the next firing was left out of the heap"
    engine.shutdown()


def test_changed_job_with_a_jitter_past_the_horizon_is_loaded_from_its_notification(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.feed = ChangeFeed(redis.Redis.from_url(engine.config.redis_url))
    engine.tick()  # subscribes; loaded until T0 + 30 s
    # Created after the load, firing at T0+20 s (inside the horizon), dispatched past it.
    job = job_factory(tenant_factory(), interval=timedelta(hours=1), anchor_at=T0)
    window, offset = _window_for(job.id, 11.0, 30.0)
    fire_at = T0 + timedelta(seconds=20)
    Job.objects.filter(id=job.id).update(jitter_window=window, next_fire_at=fire_at)
    notify_job_changed(job_id=str(job.id), partition=job.partition)

    _tick_until(engine, clock, fire_at + offset + timedelta(seconds=1))
    assert clock.now() < T0 + timedelta(seconds=60), "before the full reload"
    assert _fired(job, fire_at), "the notified job never reached the heap"
    engine.shutdown()


def test_stale_entry_is_replaced_by_the_jobs_current_next_firing(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(tenant_factory(), interval=timedelta(hours=1), anchor_at=T0)
    Job.objects.filter(id=job.id).update(next_fire_at=T0 + timedelta(seconds=2))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()  # the heap holds T0+2 s
    # Moved later, its notification lost: the entry in the heap is early, the row decides.
    later = T0 + timedelta(seconds=10)
    Job.objects.filter(id=job.id).update(next_fire_at=later)

    _tick_until(engine, clock, later + timedelta(seconds=1))
    assert _fired(job, later), "the early entry was dropped and the job left out of the heap"
    assert not _fired(job, T0 + timedelta(seconds=2))
    engine.shutdown()


def test_failure_after_a_committed_claim_gives_no_stale_entry_back(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = tenant_factory()
    every_10s = [
        job_factory(tenant, interval=timedelta(seconds=10), anchor_at=T0) for _ in range(3)
    ]
    late = job_factory(tenant, interval=timedelta(hours=1), anchor_at=T0)
    Job.objects.filter(id__in=[j.id for j in every_10s]).update(
        next_fire_at=T0 + timedelta(seconds=10)
    )
    Job.objects.filter(id=late.id).update(next_fire_at=T0 + timedelta(seconds=11))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=4, max_claim_s=60.0)
    engine.tick()
    original = engine_module.prepare_claim
    calls = {"n": 0}

    def failing_after_first(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("database went away")
        prepared = original(*args, **kwargs)
        # While the first batch is claimed, `late` falls due: the next batch is taken after
        # the first one committed, and its preparation fails.
        clock.advance(timedelta(seconds=1))
        return prepared

    monkeypatch.setattr(engine_module, "prepare_claim", failing_after_first)
    clock.advance(timedelta(seconds=10, milliseconds=500))
    with pytest.raises(RuntimeError, match="went away"):
        engine.tick()
    assert calls["n"] == 2
    assert all(_fired(job, T0 + timedelta(seconds=10)) for job in every_10s)
    monkeypatch.setattr(engine_module, "prepare_claim", original)

    _tick_until(engine, clock, T0 + timedelta(seconds=21))
    assert _fired(late, T0 + timedelta(seconds=11))
    assert all(_fired(job, T0 + timedelta(seconds=20)) for job in every_10s), (
        "a stale entry of the committed batch replaced the jobs' next firings"
    )
    engine.shutdown()


def test_a_change_whose_notification_was_lost_is_picked_up_a_slice_of_partitions_at_a_time(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(hours=1), anchor_at=T0) for _ in range(40)]
    Job.objects.filter(id__in=[j.id for j in jobs]).update(next_fire_at=T0 + timedelta(hours=1))
    loads: list[tuple[set[int], int]] = []
    original = engine_module.load_horizon

    def recording(parts: Any, **kwargs: Any) -> Any:
        parts = list(parts)
        after = kwargs.get("after")
        if after is not None:  # a periodic refresh: the partitions reloaded whole
            loads.append(({p for p in parts if p not in after}, len(parts)))
        return original(parts, **kwargs)

    monkeypatch.setattr(engine_module, "load_horizon", recording)
    clock = FakeClock(T0)
    engine = make_engine(clock, refresh_s=5.0, full_refresh_s=20.0, lookahead_s=30.0)
    engine.tick()
    clock.advance(timedelta(seconds=1))
    engine.tick()
    # Moved inside the loaded horizon, notifications lost: only a whole reload finds them.
    moved = T0 + timedelta(seconds=29)
    Job.objects.filter(id__in=[j.id for j in jobs]).update(next_fire_at=moved)

    _tick_until(engine, clock, moved)

    assert len({j.partition for j in jobs}) > 16, "the jobs span more than one slice"
    assert all(_fired(job, moved) for job in jobs), "a partition was not reloaded in time"
    assert loads, "no periodic refresh"
    # ceil(owned x refresh_s / full_refresh_s) partitions whole per refresh, never all.
    assert all(len(whole) <= -(-owned * 5 // 20) for whole, owned in loads), loads
    engine.shutdown()


def test_a_refresh_pages_through_jobs_tied_at_one_instant_a_bounded_step_a_tick(
    redis_client: redis.Redis,
) -> None:
    # Thirty jobs of one partition due at one instant, as a minute boundary's crons are: a
    # refresh step loads at most refresh_step_rows, and the next goes on after the last row
    # it loaded (next_fire_at, id), never again from the same tie.
    clock = FakeClock(T0)
    engine = make_engine(clock, refresh_step_rows=4, lookahead_s=30.0)
    engine.tick()  # takes the partitions: loaded until T0 + 30 s
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(hours=1), anchor_at=T0) for _ in range(30)]
    instant = T0 + timedelta(seconds=40)
    Job.objects.filter(id__in=[j.id for j in jobs]).update(partition=0, next_fire_at=instant)
    clock.advance(timedelta(seconds=11))  # the next refresh reaches the instant

    loaded: list[int] = []
    for _ in range(12):
        engine.tick()
        loaded.append(sum(job.id in engine.heap for job in jobs))
    steps = [b - a for a, b in zip([0, *loaded], loaded, strict=False)]
    assert max(steps) <= 4, steps
    assert loaded[-1] == 30, loaded

    _tick_until(engine, clock, instant)
    assert all(_fired(job, instant) for job in jobs)
    assert JobRun.objects.filter(job__in=jobs).count() == 30
    engine.shutdown()
