"""A backlog of several claim batches: the next batch is prepared on a second thread and
connection while the previous one is written. Every firing must still be claimed and sent
exactly once, a failure on either thread must lose no entry, and no connection may linger."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection

from beat_engine import engine as engine_module
from beat_engine.publisher import Publisher
from jobs.models import Job, JobRun
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

JOBS = 30


def _due_jobs() -> list[Job]:
    tenants = [tenant_factory() for _ in range(3)]
    jobs = [job_factory(tenants[i % 3], interval=timedelta(hours=1)) for i in range(JOBS)]
    Job.objects.filter(id__in=[j.id for j in jobs]).update(next_fire_at=T0 + timedelta(seconds=1))
    return jobs


def _sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        (count,) = cursor.fetchone()
    return int(count)


def _sent_runs(client: redis.Redis) -> Counter[str]:
    return Counter(str(message_args(m)[0]) for m in broker_messages(client))


def test_backlog_of_batches_is_claimed_and_sent_once_each(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = _due_jobs()
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=4, max_claims_per_tick=1000, max_claim_s=60.0)
    engine.tick()
    # The live floor's first read has a session of its own, closed once the read is done.
    wait_until(lambda: engine._floor_reader.passes >= 1, what="the live floor's read")
    before = _sessions()
    original = engine_module.prepare_claim
    threads: list[str] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(engine_module, "prepare_claim", recorded)
    clock.advance(timedelta(seconds=2))
    engine.tick()

    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == JOBS
    assert sorted(r.job_id for r in runs) == sorted(j.id for j in jobs)
    sent = _sent_runs(redis_client)
    assert sent == Counter({str(run.id): 1 for run in runs})
    # Eight batches: the first on the engine's thread, the other seven prepared ahead.
    assert len(threads) == 8
    assert threads[0] == threading.current_thread().name
    assert all(name.startswith("beat-prepare") for name in threads[1:])
    # The preparing thread's session is closed once the backlog has drained.
    assert _sessions() == before
    engine.shutdown()


@pytest.mark.parametrize("fail_call", [1, 3], ids=["first-lookahead", "later-lookahead"])
def test_failed_preparation_loses_no_entry(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, fail_call: int
) -> None:
    jobs = _due_jobs()
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=4, max_claims_per_tick=1000, max_claim_s=60.0)
    engine.tick()
    original = engine_module.prepare_claim
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == fail_call + 1:  # call 1 is the first batch, on the engine's thread
            raise RuntimeError("database went away")
        return original(*args, **kwargs)

    monkeypatch.setattr(engine_module, "prepare_claim", flaky)
    clock.advance(timedelta(seconds=2))
    with pytest.raises(RuntimeError, match="went away"):
        engine.tick()
    # The entries of the failed batch and of any batch taken with it went back to the heap.
    engine.tick()

    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == JOBS
    assert _sent_runs(redis_client) == Counter({str(run.id): 1 for run in runs})
    engine.shutdown()


def test_push_failing_on_the_preparing_thread_is_sent_again_once(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = _due_jobs()
    clock = FakeClock(T0)
    engine = make_engine(
        clock, claim_batch=4, max_claims_per_tick=1000, max_claim_s=60.0,
        publish_sweep_after_s=4.0,
    )  # fmt: skip
    engine.tick()
    original = Publisher.push
    calls = {"n": 0}

    def flaky(self: Publisher, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # a batch pushed from the preparing thread
            raise redis.ConnectionError("broker went away")
        original(self, *args, **kwargs)

    monkeypatch.setattr(Publisher, "push", flaky)
    clock.advance(timedelta(seconds=2))
    engine.tick()
    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == JOBS
    # The failed batch's runs were kept and sent again at the tick's resend, each once.
    assert calls["n"] > 3
    assert _sent_runs(redis_client) == Counter({str(run.id): 1 for run in runs})
    assert engine._outbox.unsent == 0

    clock.advance(timedelta(seconds=5))
    engine.tick()
    # Past the sweep's period: the sweep sends none of them again.
    assert _sent_runs(redis_client) == Counter({str(run.id): 1 for run in runs})
    assert not runs.filter(published_at__isnull=True).exists()
    engine.shutdown()


def test_batch_prepared_at_the_end_of_a_tick_is_claimed_by_the_next(
    redis_client: redis.Redis,
) -> None:
    jobs = _due_jobs()
    clock = FakeClock(T0)
    # Eight entries per tick: each tick claims two batches and carries a third, prepared.
    engine = make_engine(clock, claim_batch=4, max_claims_per_tick=8, max_claim_s=60.0)
    engine.tick()
    # The live floor's first read has a session of its own, closed once the read is done.
    wait_until(lambda: engine._floor_reader.passes >= 1, what="the live floor's read")
    before = _sessions()
    clock.advance(timedelta(seconds=2))
    ticks = 0
    while engine.tick() == 0.0 and ticks < 20:
        ticks += 1
        assert engine._carried is not None or not engine._backlog

    assert 3 <= ticks <= 5
    assert engine._carried is None
    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == JOBS
    assert _sent_runs(redis_client) == Counter({str(run.id): 1 for run in runs})
    assert _sessions() == before
    engine.shutdown()
