"""Every run that started has both lateness figures: its publish lag (lateness) and its start lag,
also when a worker started it before the engine's deferred published mark was written."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import redis

from beat_engine.clock import SystemClock
from jobs.models import JobRun
from jobs.services.runs import run_retry
from jobs.services.starts import StartOutcome, run_start
from jobs.states import RunState
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _db_now() -> datetime:
    return SystemClock().now()


def test_a_spike_started_before_its_deferred_marks_still_records_both_lags(
    redis_client: redis.Redis, worker: CeleryWorker
) -> None:
    real_now = _db_now()
    tenant = tenant_factory(now=real_now)
    # Due half a minute ago (interval 60 s from 90 s ago): claimed on the first tick, on time
    # as far as catch-up goes, and every figure positive on either clock.
    jobs = [
        job_factory(tenant, interval=timedelta(seconds=60), now=real_now - timedelta(seconds=90))
        for _ in range(6)
    ]
    clock = FakeClock(real_now)
    # Two firings per tick: while claims stay due the marks are deferred (the fake monotonic
    # clock never reaches mark_delay_s), so the worker starts and finishes these runs first.
    engine = make_engine(clock, claim_batch=2, max_claims_per_tick=2, mark_delay_s=60.0)
    engine.tick()
    early = list(JobRun.objects.filter(job__in=jobs).values_list("id", flat=True))
    assert len(early) == 2

    def early_done() -> bool:
        runs = JobRun.objects.filter(id__in=early)
        return all(run.state == RunState.SUCCEEDED for run in runs)

    wait_until(early_done, timeout_s=60, what="the worker to run the first two firings")
    unmarked = JobRun.objects.filter(id__in=early, published_at__isnull=True, lateness__isnull=True)
    assert unmarked.count() == 2, "the marks were meant to wait for the spike to drain"

    for _ in range(5):
        clock.advance(timedelta(milliseconds=10))
        engine.tick()
    engine.shutdown()

    def all_done() -> bool:
        runs = JobRun.objects.filter(job__in=jobs)
        return runs.count() == 6 and all(run.state == RunState.SUCCEEDED for run in runs)

    wait_until(all_done, timeout_s=60, what="the worker to run all six firings")
    for run in JobRun.objects.filter(job__in=jobs):
        assert run.lateness is not None, run
        assert run.start_lag is not None, run
        assert run.due_at is not None
        assert run.lateness >= timedelta(seconds=29), run.lateness
        # Pushed before it started, on one machine's clocks (the engine's fake clock began at
        # the database's instant and moved only milliseconds).
        assert run.start_lag >= run.lateness - timedelta(seconds=1), (run.start_lag, run.lateness)


def test_the_mark_of_a_run_already_retrying_measures_from_its_first_due(
    redis_client: redis.Redis,
) -> None:
    real_now = _db_now()
    tenant = tenant_factory(now=real_now)
    # Two jobs, one claim per tick: a claim stays due after the first tick, so its mark waits.
    # On a queue no worker reads: this test plays the worker.
    for _ in range(2):
        job_factory(
            tenant,
            interval=timedelta(seconds=60),
            queue="lateness-unread",
            now=real_now - timedelta(seconds=90),
        )
    clock = FakeClock(real_now)
    engine = make_engine(clock, claim_batch=1, max_claims_per_tick=1, mark_delay_s=60.0)
    engine.tick()
    run = JobRun.objects.get(tenant=tenant)
    first_due = run.due_at
    assert first_due is not None
    assert run.published_at is None

    started_at = first_due + timedelta(seconds=40)
    started = run_start(run_id=run.id, attempt=1, worker="w", now=started_at)
    assert started.outcome == StartOutcome.STARTED
    # The first attempt fails and waits for a retry: due_at now holds the retry's instant.
    retry_due = started_at + timedelta(minutes=10)
    state = run_retry(run_id=run.id, attempt=1, due_at=retry_due, error="boom", now=started_at)
    assert state == RunState.RETRY_WAIT

    clock.advance(timedelta(milliseconds=10))
    engine.tick()
    engine.shutdown()
    run.refresh_from_db()
    assert run.start_lag == timedelta(seconds=40)
    assert run.due_at == retry_due
    # Pushed at the engine's instant, measured from the first due instant, not the retry's.
    assert run.lateness == real_now - first_due
    assert run.published_at is None
