"""Catch-up policies, jitter, durable timers (retries, expired leases) and the publish sweep."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import redis
from django.conf import settings

from beat_engine.jitter import jitter_offset
from jobs.models import DeadLetter, Job, JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, run_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _states(job: Job) -> list[str]:
    runs = JobRun.objects.filter(job=job).order_by("scheduled_for")
    return list(runs.values_list("state", flat=True))


@pytest.mark.parametrize(
    ("policy", "deadline", "expected"),
    [
        ("skip", None, ["missed"] * 9 + ["queued"]),
        ("run_once", None, ["missed"] * 9 + ["queued"]),
        ("replay_all", None, ["queued"] * 10),
        # 10 firings one minute apart, the oldest 9.5 minutes late: a 3.5-minute deadline
        # leaves the newest four on time.
        ("replay_all", timedelta(minutes=3, seconds=30), ["missed"] * 6 + ["queued"] * 4),
        ("skip", timedelta(seconds=10), ["missed"] * 10),
        ("run_once", timedelta(seconds=10), ["missed"] * 9 + ["queued"]),
    ],
)
def test_catch_up_after_an_outage_follows_the_policy(
    redis_client: redis.Redis, policy: str, deadline: timedelta | None, expected: list[str]
) -> None:
    job = job_factory(
        interval=timedelta(minutes=1), catchup_policy=policy, starting_deadline=deadline
    )
    clock = FakeClock(T0 + timedelta(minutes=10, seconds=30))  # the engine was down 10 minutes
    make_engine(clock).tick()
    assert _states(job) == expected
    job.refresh_from_db()
    assert job.next_fire_at == T0 + timedelta(minutes=11)
    assert len(broker_messages(redis_client)) == expected.count("queued")


def test_replay_all_is_bounded_by_the_job_limit(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(seconds=1), catchup_policy="replay_all", catchup_limit=5)
    make_engine(FakeClock(T0 + timedelta(seconds=20))).tick()
    states = _states(job)
    assert states[-5:] == ["queued"] * 5
    assert set(states[:-5]) == {"missed"}


def test_jittered_firing_is_dispatched_at_its_stable_offset(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(minutes=1), jitter_window=timedelta(seconds=20))
    offset = jitter_offset(job.id, timedelta(seconds=20))
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    clock.advance(timedelta(minutes=1) + offset - timedelta(milliseconds=1))
    engine.tick()
    assert not JobRun.objects.exists()
    clock.advance(timedelta(milliseconds=1))
    engine.tick()
    run = JobRun.objects.get(job=job)
    assert run.scheduled_for == T0 + timedelta(minutes=1)
    assert run.due_at == run.scheduled_for + offset


def test_retry_wait_run_is_queued_as_next_attempt_when_due(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(hours=1))
    run = run_factory(
        job, scheduled_for=T0, state=RunState.RETRY_WAIT, attempt=1,
        due_at=T0 + timedelta(seconds=30),
    )  # fmt: skip
    clock = FakeClock(T0 + timedelta(seconds=29))
    engine = make_engine(clock)
    engine.tick()
    assert JobRun.objects.get(id=run.id).state == RunState.RETRY_WAIT
    clock.advance(timedelta(seconds=1))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 2)
    assert run.epoch == engine.leases[job.partition].epoch
    assert [message_args(m) for m in broker_messages(redis_client)] == [[str(run.id), 2]]


def test_running_run_with_expired_lease_becomes_a_new_attempt(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(hours=1), max_attempts=3)
    run = run_factory(
        job, scheduled_for=T0, state=RunState.RUNNING, attempt=1, started_at=T0,
        lease_until=T0 + timedelta(seconds=30), worker="w1",
    )  # fmt: skip
    RunAttempt.objects.create(run=run, attempt=1, worker="w1", started_at=T0)
    clock = FakeClock(T0 + timedelta(seconds=30))
    engine = make_engine(clock)
    engine.tick()
    assert JobRun.objects.get(id=run.id).state == RunState.RUNNING  # not yet expired
    clock.advance(timedelta(seconds=1))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt, run.lease_until) == (RunState.QUEUED, 2, None)
    assert RunAttempt.objects.get(run=run, attempt=1).outcome == AttemptOutcome.LOST
    assert [message_args(m) for m in broker_messages(redis_client)] == [[str(run.id), 2]]


def test_expired_lease_on_last_attempt_dead_letters_the_run(redis_client: redis.Redis) -> None:
    job = job_factory(interval=timedelta(hours=1), max_attempts=2)
    run = run_factory(
        job, scheduled_for=T0, state=RunState.RUNNING, attempt=2, started_at=T0,
        lease_until=T0,
    )  # fmt: skip
    engine = make_engine(FakeClock(T0 + timedelta(seconds=1)))
    engine.tick()
    run.refresh_from_db()
    assert run.state == RunState.DEAD
    letter = DeadLetter.objects.get(run=run)
    assert letter.attempts == 2
    assert "lease expired" in letter.last_error
    assert broker_messages(redis_client) == []
    # The same notice the executor sends when it dead-letters a run, sent off the tick's
    # thread (beat_engine/notices.py); shutdown lets the sender finish.
    engine.shutdown()
    notices = broker_messages(redis_client, settings.SCHEDULER["DEAD_LETTER_QUEUE"])
    assert [message_args(m)[:3] for m in notices] == [[str(run.id), str(job.id), 2]]


def test_queued_run_whose_publish_was_lost_is_published_by_the_sweep(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(hours=1))
    clock = FakeClock(T0 + timedelta(seconds=5))
    engine = make_engine(clock, publish_sweep_after_s=30.0)
    engine.tick()
    # As if this node's push failed after its claim committed (the broker was down).
    run = run_factory(
        job, scheduled_for=T0, state=RunState.QUEUED, attempt=1, queued_at=T0, due_at=T0
    )
    clock.advance(timedelta(seconds=5))
    engine.tick()
    assert broker_messages(redis_client) == []
    clock.advance(timedelta(seconds=21))
    engine.tick()
    run.refresh_from_db()
    assert run.published_at == clock.now()
    assert [message_args(m) for m in broker_messages(redis_client)] == [[str(run.id), 1]]


def test_node_taking_a_partition_sends_what_its_last_owner_never_pushed(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(interval=timedelta(hours=1))
    # As if the partition's last owner crashed between its claim commit and its push.
    lost = [
        run_factory(job, scheduled_for=T0 + timedelta(seconds=i), state=RunState.QUEUED,
                    attempt=1, queued_at=T0 + timedelta(seconds=i), due_at=T0)
        for i in range(5)
    ]  # fmt: skip
    clock = FakeClock(T0 + timedelta(seconds=6))
    # Two sweep batches: the takeover keeps going past one claim batch.
    engine = make_engine(clock, publish_sweep_after_s=30.0, claim_batch=3)
    engine.tick()
    assert sorted(message_args(m)[0] for m in broker_messages(redis_client)) == sorted(
        str(run.id) for run in lost
    )
    assert not JobRun.objects.filter(published_at__isnull=True).exists()
    # Marked at once: neither the next tick nor the periodic sweep sends them again.
    clock.advance(timedelta(seconds=31))
    engine.tick()
    assert len(broker_messages(redis_client)) == 5


def test_a_full_timer_batch_is_followed_by_larger_ones_in_the_same_tick(
    redis_client: redis.Redis,
) -> None:
    # 20 due runs, claim_batch 3: batches of 3, 6 and then at most 12 (four times claim_batch)
    # drain them in one tick, where one batch per tick took seven.
    job = job_factory(interval=timedelta(hours=1))
    runs = [
        run_factory(
            job,
            scheduled_for=T0 - timedelta(hours=i),
            state=RunState.RETRY_WAIT,
            attempt=1,
            due_at=T0,
        )
        for i in range(20)
    ]
    engine = make_engine(FakeClock(T0 + timedelta(seconds=1)), claim_batch=3)
    engine.tick()
    queued = JobRun.objects.filter(job=job, state=RunState.QUEUED, attempt=2)
    assert queued.count() == 20
    assert set(queued.values_list("epoch", flat=True)) == {engine.leases[job.partition].epoch}
    sent = sorted(message_args(m)[0] for m in broker_messages(redis_client))
    assert sent == sorted(str(run.id) for run in runs)


def test_a_timer_batch_grows_no_further_than_four_claim_batches(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # 40 due runs, claim_batch 3: batches of 3, 6, 12, 12 and the last 7, all in one tick; a
    # run not yet due stays waiting (never early).
    job = job_factory(interval=timedelta(hours=1))
    for i in range(40):
        run_factory(
            job, scheduled_for=T0 - timedelta(hours=i), state=RunState.RETRY_WAIT, attempt=1,
            due_at=T0,
        )  # fmt: skip
    later = run_factory(
        job, scheduled_for=T0 + timedelta(hours=1), state=RunState.RETRY_WAIT, attempt=1,
        due_at=T0 + timedelta(minutes=5),
    )  # fmt: skip
    engine = make_engine(FakeClock(T0 + timedelta(seconds=1)), claim_batch=3)
    with caplog.at_level(logging.INFO, logger="beat_engine"):
        engine.tick()
    fired = [r.fired for r in caplog.records if r.getMessage() == "beat.timers"]
    assert fired == [3, 6, 12, 12, 7]
    assert JobRun.objects.filter(job=job, state=RunState.QUEUED).count() == 40
    assert JobRun.objects.get(id=later.id).state == RunState.RETRY_WAIT
    assert len(broker_messages(redis_client)) == 40


def test_a_timer_due_before_the_next_poll_is_fired_when_it_falls_due(
    redis_client: redis.Redis,
) -> None:
    # Due 0.2 s after a pass that found it not yet due (a child's run whose parent's worker read
    # the database clock a little ahead of this node): queued by 0.25 s, not at the 0.5 s poll.
    job = job_factory(interval=timedelta(hours=1))
    run = run_factory(
        job, scheduled_for=T0, state=RunState.RETRY_WAIT, attempt=1,
        due_at=T0 + timedelta(milliseconds=200),
    )  # fmt: skip
    clock = FakeClock(T0)
    engine = make_engine(clock)
    engine.tick()
    assert JobRun.objects.get(id=run.id).state == RunState.RETRY_WAIT
    clock.advance(timedelta(milliseconds=150))
    engine.tick()
    assert JobRun.objects.get(id=run.id).state == RunState.RETRY_WAIT
    clock.advance(timedelta(milliseconds=100))
    engine.tick()
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 2)
    assert [message_args(m) for m in broker_messages(redis_client)] == [[str(run.id), 2]]
