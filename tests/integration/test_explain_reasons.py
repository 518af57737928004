"""Why didn't it fire? Each reason produced by the code path that decides it, on real
PostgreSQL and Redis, then explained by explain_firing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.db import connection

from jobs.explain_rules import Verdict
from jobs.models import JobRun, Tenant
from jobs.models_reasons import DecisionReason, JobEvent, JobEventKind, ReasonKind
from jobs.services.explain import explain_firing
from jobs.services.jobs import job_pause
from jobs.services.starts import StartOutcome, run_start
from jobs.states import RunState
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        value = cursor.fetchone()[0]
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def test_a_firing_passed_while_the_job_was_paused_is_explained_by_the_pause(
    redis_client: redis.Redis,
) -> None:
    # Job events carry the database's clock, so this test's instants start from it.
    base = _db_now().replace(microsecond=0)
    job = job_factory(cron="* * * * *", now=base)
    job_pause(job_id=job.id, now=base)
    event = JobEvent.objects.get(job=job)
    assert event.kind == JobEventKind.PAUSED
    assert abs(event.at - base) < timedelta(seconds=30)
    assert job.next_fire_at is not None
    # The second firing after the pause: safely after the event whatever the second it fell on.
    instant = job.next_fire_at + timedelta(minutes=1)
    clock = FakeClock(instant + timedelta(seconds=30))
    make_engine(clock).tick()
    assert not JobRun.objects.filter(job=job).exists()

    result = explain_firing(job, instant, now=clock.now())
    assert result.verdict == Verdict.PAUSED
    assert event.at.isoformat() in result.reason


def test_firings_missed_in_an_outage_are_one_recorded_range_however_many(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(seconds=1), catchup_policy="skip")
    clock = FakeClock(T0 + timedelta(hours=2, milliseconds=500))  # the engine was down 2 hours
    make_engine(clock).tick()
    # 7,200 due firings: the newest runs, 7,199 are missed, 1,000 of them listed as runs and
    # all of them in one reason row.
    reason = DecisionReason.objects.get(job=job)
    assert reason.kind == ReasonKind.MISSED_CATCH_UP
    assert reason.count == 7199
    assert reason.first_at == T0 + timedelta(seconds=1)
    assert reason.last_at == T0 + timedelta(seconds=7199)
    assert "catch-up policy skip" in reason.detail
    assert JobRun.objects.filter(job=job, state=RunState.MISSED).count() == 1000

    unlisted = explain_firing(job, T0 + timedelta(minutes=5), now=clock.now())
    assert unlisted.verdict == Verdict.MISSED_CATCH_UP
    assert unlisted.run_id is None
    assert "7199 firings" in unlisted.reason
    listed = explain_firing(job, T0 + timedelta(seconds=7000), now=clock.now())
    assert listed.verdict == Verdict.MISSED_CATCH_UP
    assert listed.run_id is not None
    newest = explain_firing(job, T0 + timedelta(seconds=7200), now=clock.now())
    assert newest.verdict == Verdict.FIRED
    assert newest.evidence["lateness_s"] == 0.5


def test_a_claim_with_nothing_missed_records_no_reason(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(minutes=1))
    clock = FakeClock(T0 + timedelta(minutes=1, milliseconds=200))
    make_engine(clock).tick()
    assert not DecisionReason.objects.filter(job=job).exists()
    result = explain_firing(job, T0 + timedelta(minutes=1), now=clock.now())
    assert result.verdict == Verdict.FIRED
    assert "lateness 0.200 s" in result.reason
    off = explain_firing(job, T0 + timedelta(minutes=1, seconds=30), now=clock.now())
    assert off.verdict == Verdict.NEVER_DUE
    assert off.previous_firing == T0 + timedelta(minutes=1)
    assert off.next_firing == T0 + timedelta(minutes=2)


def test_a_run_published_late_is_explained_as_engine_late(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(hours=1))
    clock = FakeClock(T0 + timedelta(hours=1, seconds=4))
    make_engine(clock).tick()
    result = explain_firing(job, T0 + timedelta(hours=1), now=clock.now())
    assert result.verdict == Verdict.ENGINE_LATE
    assert result.evidence["lateness_s"] == 4.0


def test_a_firing_skipped_by_the_concurrency_policy(redis_client: redis.Redis) -> None:
    job = job_factory(concurrency_policy="forbid")
    now = T0 + timedelta(days=1)
    earlier, later = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
    runs = [
        run_factory(job, scheduled_for=at, state=RunState.QUEUED, attempt=1, queued_at=now,
                    due_at=None)
        for at in (earlier, later)
    ]  # fmt: skip
    assert run_start(run_id=runs[0].id, attempt=1, worker="w", now=now).outcome == (
        StartOutcome.STARTED
    )
    run_start(run_id=runs[1].id, attempt=1, worker="w", now=now)
    assert JobRun.objects.get(id=runs[1].id).state == RunState.SKIPPED

    result = explain_firing(job, later, now=now)
    assert result.verdict == Verdict.SKIPPED_CONCURRENCY
    assert result.run_id == str(runs[1].id)
    assert str(runs[0].id) in result.reason


def test_a_firing_held_back_by_its_tenant_limit_is_deferred_then_late(
    redis_client: redis.Redis,
) -> None:
    tenant = tenant_factory()
    Tenant.objects.filter(id=tenant.id).update(max_queued_runs=1)
    first = job_factory(tenant, interval=timedelta(hours=1))
    second = job_factory(tenant, interval=timedelta(hours=1))
    due = T0 + timedelta(hours=1)
    clock = FakeClock(due)
    engine = make_engine(clock)
    for _ in range(7):  # looks once a second; the counts are written every 5 s
        engine.tick()
        clock.advance(timedelta(seconds=1))
    held = DecisionReason.objects.get(kind=ReasonKind.DEFERRED_TENANT_LIMIT)
    assert held.job_id in (first.id, second.id)
    assert held.first_at == due
    assert held.count >= 5
    waiting = first if held.job_id == first.id else second
    assert not JobRun.objects.filter(job=waiting).exists()
    result = explain_firing(waiting, due, now=clock.now())
    assert result.verdict == Verdict.DEFERRED_TENANT_LIMIT
    assert "held back" in result.reason

    # The tenant's queued run starts: the held firing is claimed, late, and still explained
    # by the limit rather than by the engine.
    JobRun.objects.filter(tenant=tenant).update(
        state=RunState.RUNNING, started_at=clock.now(), lease_until=clock.now() + timedelta(hours=1)
    )
    engine.tick()
    run = JobRun.objects.get(job=waiting)
    assert run.lateness is not None
    assert run.lateness >= timedelta(seconds=7)
    late = explain_firing(waiting, due, now=clock.now())
    assert late.verdict == Verdict.DEFERRED_TENANT_LIMIT
    assert late.run_id == str(run.id)


def test_reasons_and_events_past_the_retention_are_purged_by_the_engine(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(minutes=1))
    kept = job_factory(interval=timedelta(minutes=1))
    make_engine(FakeClock(T0 + timedelta(minutes=10, seconds=1))).tick()
    old = {r.job_id: r.id for r in DecisionReason.objects.filter(job__in=[job, kept])}
    assert len(old) == 2
    job_pause(job_id=job.id, now=T0)
    real = _db_now()
    # Recorded 31 and 29 days before the engine's clock: the first is past the 30-day retention.
    DecisionReason.objects.filter(job=kept).update(updated_at=real - timedelta(days=29))
    DecisionReason.objects.filter(job=job).update(updated_at=real - timedelta(days=31))
    JobEvent.objects.filter(job=job).update(at=real - timedelta(days=31))
    clock = FakeClock(real)
    engine = make_engine(clock)
    engine.tick()
    assert DecisionReason.objects.filter(id=old[job.id]).exists(), "purged every 10 minutes"
    clock.advance(timedelta(minutes=10, seconds=1))
    engine.tick()
    assert not DecisionReason.objects.filter(id=old[job.id]).exists()
    assert not JobEvent.objects.filter(job=job).exists()
    assert DecisionReason.objects.filter(id=old[kept.id]).exists()
