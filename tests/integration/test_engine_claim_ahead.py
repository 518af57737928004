"""Claim ahead (docs/engine.md, "Claim ahead"): a firing is written before its instant and
pushed at it; an edit, pause or cancel in between fires as edited or not at all; a start before
the instant changes nothing; a node that takes the partition over pushes what its last owner
claimed ahead."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from beat_engine.engine import BeatEngine
from jobs.models import Job, JobRun
from jobs.services import starts
from jobs.services.jobs import job_cancel, job_input_from, job_pause, job_resume, job_update
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, run_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

INSTANT = T0 + timedelta(minutes=1)
AHEAD_S = 10.0


def _engine(clock: FakeClock, node: str = "node-a") -> BeatEngine:
    return make_engine(clock, node, claim_ahead_s=AHEAD_S, lookahead_s=30.0)


def _pushed_run_ids(client: redis.Redis, queue: str = "scheduler") -> list[uuid.UUID]:
    return [uuid.UUID(str(message_args(m)[0])) for m in broker_messages(client, queue)]


def _claim_ahead(clock: FakeClock, engine: BeatEngine) -> None:
    """Tick 5 s before INSTANT: the firing is inside the claim-ahead window."""
    clock.advance(INSTANT - timedelta(seconds=5) - clock.now())
    engine.tick()


def _claimed_ahead_job(**fields: Any) -> tuple[Job, FakeClock, BeatEngine, JobRun]:
    """A minutely job whose INSTANT firing an engine has claimed ahead, and that run."""
    job = job_factory(cron="* * * * *", **fields)
    clock = FakeClock(T0)
    engine = _engine(clock)
    _claim_ahead(clock, engine)
    return job, clock, engine, JobRun.objects.get(job=job)


def _tick_at(clock: FakeClock, engine: BeatEngine, at: datetime) -> None:
    clock.advance(at - clock.now())
    engine.tick()


def test_firing_is_written_ahead_and_pushed_at_its_instant(redis_client: redis.Redis) -> None:
    job = job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    engine = _engine(clock)

    _claim_ahead(clock, engine)

    run = JobRun.objects.get(job=job)
    assert (run.scheduled_for, run.state, run.attempt) == (INSTANT, RunState.QUEUED, 1)
    assert (run.due_at, run.queued_at, run.published_at) == (INSTANT, INSTANT, None)
    job.refresh_from_db()
    assert job.next_fire_at == INSTANT + timedelta(minutes=1)
    assert _pushed_run_ids(redis_client) == []

    _tick_at(clock, engine, INSTANT - timedelta(milliseconds=1))
    assert _pushed_run_ids(redis_client) == [], "pushed before its instant"

    _tick_at(clock, engine, INSTANT)
    assert _pushed_run_ids(redis_client) == [run.id]
    # The job's next firing entered the heap once the armed run was pushed: it is claimed
    # ahead in its turn, once, not a second time for this instant.
    _tick_at(clock, engine, INSTANT + timedelta(seconds=55))
    assert JobRun.objects.filter(job=job).count() == 2
    assert _pushed_run_ids(redis_client) == [run.id]


def test_a_start_before_the_instant_is_early_and_changes_nothing(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    _claim_ahead(clock, _engine(clock))
    run = JobRun.objects.get(job=job)

    early = starts.run_start(
        run_id=run.id, attempt=1, worker="w", now=INSTANT - timedelta(milliseconds=3)
    )

    assert early.outcome == starts.StartOutcome.EARLY
    assert early.not_before == INSTANT
    run.refresh_from_db()
    assert (run.state, run.attempt, run.started_at) == (RunState.QUEUED, 1, None)
    on_time = starts.run_start(run_id=run.id, attempt=1, worker="w", now=INSTANT)
    assert on_time.outcome == starts.StartOutcome.STARTED


def test_edit_between_the_claim_ahead_and_the_instant_fires_as_edited(
    redis_client: redis.Redis,
) -> None:
    job, clock, engine, early = _claimed_ahead_job(queue="scheduler")

    edited = dataclasses.replace(job_input_from(Job.objects.get(id=job.id)), queue="edited")
    job_update(job_id=job.id, data=edited, expected_version=None, now=clock.now())

    assert not JobRun.objects.filter(id=early.id).exists(), "the claim ahead was not withdrawn"
    job.refresh_from_db()
    assert job.next_fire_at == INSTANT
    engine._reload_jobs({job.id: job.partition})
    _tick_at(clock, engine, INSTANT)

    run = JobRun.objects.get(job=job)
    assert run.scheduled_for == INSTANT
    assert _pushed_run_ids(redis_client, "edited") == [run.id]
    # The message pushed for the withdrawn run starts nothing.
    assert _pushed_run_ids(redis_client) == [early.id]
    stale = starts.run_start(run_id=early.id, attempt=1, worker="w", now=INSTANT)
    assert stale.outcome == starts.StartOutcome.STALE


def test_schedule_edit_between_the_claim_ahead_and_the_instant_drops_the_old_firing(
    redis_client: redis.Redis,
) -> None:
    job = job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    engine = _engine(clock)
    _claim_ahead(clock, engine)

    edited = dataclasses.replace(job_input_from(Job.objects.get(id=job.id)), cron="0 * * * *")
    job_update(job_id=job.id, data=edited, expected_version=None, now=clock.now())
    engine._reload_jobs({job.id: job.partition})
    _tick_at(clock, engine, INSTANT + timedelta(seconds=1))

    assert not JobRun.objects.filter(job=job).exists()
    job.refresh_from_db()
    assert job.next_fire_at == T0 + timedelta(hours=1)


def test_pause_between_the_claim_ahead_and_the_instant_fires_nothing_until_resumed(
    redis_client: redis.Redis,
) -> None:
    job, clock, engine, early = _claimed_ahead_job(catchup_policy="replay_all")

    job.refresh_from_db()
    assert job.last_fire_at == INSTANT  # the claim ahead recorded it as fired
    job_pause(job_id=job.id, now=clock.now())
    job.refresh_from_db()
    assert job.last_fire_at is None  # withdrawn: it never fired, and nothing fired before it
    engine._reload_jobs({job.id: job.partition})
    _tick_at(clock, engine, INSTANT + timedelta(seconds=1))

    assert not JobRun.objects.filter(job=job).exists()
    assert starts.run_start(run_id=early.id, attempt=1, worker="w", now=INSTANT).outcome == (
        starts.StartOutcome.STALE
    )
    job_resume(job_id=job.id, now=clock.now())
    engine._reload_jobs({job.id: job.partition})
    _tick_at(clock, engine, INSTANT + timedelta(seconds=2))
    resumed = JobRun.objects.get(job=job)
    assert (resumed.scheduled_for, resumed.state) == (INSTANT, RunState.QUEUED)
    assert resumed.id in _pushed_run_ids(redis_client)


def test_cancel_between_the_claim_ahead_and_the_instant_fires_nothing(
    redis_client: redis.Redis,
) -> None:
    job, clock, engine, early = _claimed_ahead_job()

    job_cancel(job_id=job.id, now=clock.now())
    _tick_at(clock, engine, INSTANT)

    early.refresh_from_db()
    assert early.state == RunState.CANCELLED
    assert starts.run_start(run_id=early.id, attempt=1, worker="w", now=INSTANT).outcome == (
        starts.StartOutcome.STALE
    )
    assert JobRun.objects.filter(job=job).count() == 1


@pytest.mark.parametrize("policy", ["forbid", "replace"])
def test_a_run_claimed_ahead_is_not_in_flight_for_the_concurrency_policy(
    redis_client: redis.Redis, policy: str
) -> None:
    job = job_factory(cron="* * * * *", concurrency_policy=policy)
    due = run_factory(
        job, scheduled_for=INSTANT, state=RunState.QUEUED, attempt=1, queued_at=INSTANT
    )
    later = INSTANT + timedelta(minutes=1)
    ahead = run_factory(job, scheduled_for=later, state=RunState.QUEUED, attempt=1, queued_at=later)

    started = starts.run_start(run_id=due.id, attempt=1, worker="w", now=INSTANT)

    assert started.outcome == starts.StartOutcome.STARTED
    ahead.refresh_from_db()
    assert (ahead.state, ahead.cancel_requested) == (RunState.QUEUED, False)


def test_a_node_taking_the_partitions_over_pushes_what_its_last_owner_claimed_ahead(
    redis_client: redis.Redis,
) -> None:
    jobs = [job_factory(cron="* * * * *") for _ in range(5)]
    clock = FakeClock(T0)
    first = _engine(clock, "node-a")
    _claim_ahead(clock, first)
    claimed = set(JobRun.objects.values_list("id", flat=True))
    assert len(claimed) == len(jobs)
    # Gone without pushing them: its leases are released, its memory with it.
    first.shutdown()

    second = _engine(clock, "node-b")
    second.tick()
    assert _pushed_run_ids(redis_client) == []
    _tick_at(clock, second, INSTANT)

    assert sorted(_pushed_run_ids(redis_client)) == sorted(claimed)
    assert JobRun.objects.count() == len(jobs)


@pytest.mark.parametrize(("slack_s", "claimed_before_the_push"), [(0.0, False), (0.03, True)])
def test_a_claim_ahead_may_run_the_slack_past_the_next_armed_push_never_pushing_early(
    redis_client: redis.Redis, slack_s: float, claimed_before_the_push: bool
) -> None:
    armed = job_factory(cron="* * * * *")
    later = job_factory(interval=timedelta(hours=1), anchor_at=T0)
    # Outside the claim-ahead window of the first pass, inside that of a pass 10 ms before the
    # armed push: under a steady stream there is always a push that close.
    Job.objects.filter(id=later.id).update(next_fire_at=INSTANT + timedelta(seconds=5.5))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_ahead_s=AHEAD_S, lookahead_s=30.0,
                         claim_ahead_slack_s=slack_s)  # fmt: skip
    _claim_ahead(clock, engine)
    assert JobRun.objects.filter(job=armed).count() == 1
    assert not JobRun.objects.filter(job=later).exists()

    _tick_at(clock, engine, INSTANT - timedelta(milliseconds=10))

    assert _pushed_run_ids(redis_client) == [], "pushed before its instant"
    assert JobRun.objects.filter(job=later).exists() is claimed_before_the_push
    _tick_at(clock, engine, INSTANT)
    assert _pushed_run_ids(redis_client) == [JobRun.objects.get(job=armed).id]
    _tick_at(clock, engine, INSTANT + timedelta(seconds=5))
    assert len(_pushed_run_ids(redis_client)) == 1, "the later firing pushed before its instant"
    _tick_at(clock, engine, INSTANT + timedelta(seconds=5.5))
    assert _pushed_run_ids(redis_client)[1] == JobRun.objects.get(job=later).id
    engine.shutdown()


def test_a_claim_ahead_pass_pushes_the_armed_runs_due_meanwhile_and_goes_on(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a steady stream an armed run falls due every few milliseconds, so one is always
    due by the time a pass starts. A pass that ended there never claimed ahead again: every
    later firing was claimed at its instant (docs/engine.md, "A node that falls behind a stream
    gets ahead again")."""
    first, second, later = (
        job_factory(interval=timedelta(hours=1), anchor_at=T0) for _ in range(3)
    )
    instants = {
        first.id: INSTANT,
        second.id: INSTANT + timedelta(milliseconds=5),
        # Outside the window of the pass 5 s before INSTANT, inside that of the pass at it.
        later.id: INSTANT + timedelta(seconds=5.5),
    }
    for job_id, at in instants.items():
        Job.objects.filter(id=job_id).update(next_fire_at=at)
    clock = FakeClock(T0)
    engine = _engine(clock)
    _claim_ahead(clock, engine)
    assert set(JobRun.objects.values_list("job_id", flat=True)) == {first.id, second.id}

    # The tick's own push of the first run takes 10 ms: the second's instant passes meanwhile.
    push = engine._push_armed

    def slow_push() -> None:
        push()
        clock.advance(timedelta(milliseconds=10))

    monkeypatch.setattr(engine, "_push_armed", slow_push)
    _tick_at(clock, engine, INSTANT)

    runs = dict(JobRun.objects.values_list("job_id", "id"))
    assert later.id in runs, "the pass claimed nothing ahead once an armed run was due"
    assert _pushed_run_ids(redis_client) == [runs[first.id], runs[second.id]]
    engine.shutdown()


def test_claims_at_the_instant_stop_for_an_armed_push_that_falls_due(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node behind its stream claims firings at their instant batch after batch; an armed
    run whose instant comes meanwhile is pushed before the next of those batches, not after."""
    armed = job_factory(interval=timedelta(hours=1), anchor_at=T0)
    Job.objects.filter(id=armed.id).update(next_fire_at=INSTANT + timedelta(milliseconds=5))
    clock = FakeClock(T0)
    engine = _engine(clock)
    _claim_ahead(clock, engine)
    assert JobRun.objects.filter(job=armed).count() == 1
    # Two firings the engine learns of only now (as from the change feed), one due at the
    # instant and one 3 ms after the armed run's.
    behind, next_behind = (job_factory(interval=timedelta(hours=1), anchor_at=T0) for _ in range(2))
    Job.objects.filter(id=behind.id).update(next_fire_at=INSTANT)
    Job.objects.filter(id=next_behind.id).update(next_fire_at=INSTANT + timedelta(milliseconds=8))
    engine._reload_jobs({j.id: j.partition for j in (behind, next_behind)})

    # The claim of the first takes 10 ms: both the armed instant and the second firing pass.
    commit = engine._commit

    def slow_commit(batch: Any) -> None:
        commit(batch)
        clock.advance(timedelta(milliseconds=10))

    monkeypatch.setattr(engine, "_commit", slow_commit)
    _tick_at(clock, engine, INSTANT)

    runs = dict(JobRun.objects.values_list("job_id", "id"))
    assert _pushed_run_ids(redis_client) == [runs[behind.id], runs[armed.id], runs[next_behind.id]]
    engine.shutdown()
