"""Staged messages (beat_engine/broker_staging.py): a group of runs armed for one instant has
its messages in a staging list from its claim on, and they reach the broker list at the push,
each once, in the order a direct push would give them; a group that cannot be moved whole,
under the epochs held now, is deleted and its runs pushed as any run."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis

from beat_engine.broker_ledger import count_key
from beat_engine.config import EngineConfig
from beat_engine.engine import BeatEngine
from beat_engine.publisher import Publisher, QueuedRun, queue_key
from jobs.models import JobRun
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory

pytestmark = [pytest.mark.integration]

INSTANT = T0 + timedelta(minutes=1)
LIST = queue_key("scheduler", 5)


@pytest.fixture
def publisher(redis_client: redis.Redis) -> Publisher:
    config = EngineConfig.from_settings(node_id="n")
    return Publisher(redis.Redis.from_url(config.broker_url), origin="n", staging_ttl_s=90)


def _runs(count: int, partition: int = 7) -> list[QueuedRun]:
    return [QueuedRun(uuid.uuid4(), 1, partition, "scheduler", 5, INSTANT) for _ in range(count)]


def _pushed(client: redis.Redis) -> list[tuple[uuid.UUID, int]]:
    """(run id, epoch) of every message in the queue, oldest first."""
    return [
        (uuid.UUID(str(message_args(m)[0])), m["headers"]["sched_epoch"])
        for m in broker_messages(client)
    ]


def _staging_keys(client: redis.Redis) -> list[bytes]:
    return list(client.scan_iter(match="sched:staged:*"))


def test_a_staged_group_reaches_the_queue_at_its_push_in_order_and_once(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(5)
    rendered = publisher.render(runs, {7: 3})

    staged = publisher.stage(runs, rendered, min_runs=5)

    (group,) = set(staged.values())
    assert set(staged) == {r.run_id for r in runs}
    assert redis_client.llen(group.key) == 5
    assert 0 < redis_client.pttl(group.key) <= 90_000
    assert _pushed(redis_client) == [], "staged messages are not in the queue before the push"

    positions = publisher.push(runs, {7: 3}, rendered, [group])

    assert _pushed(redis_client) == [(r.run_id, 3) for r in runs]
    assert _staging_keys(redis_client) == []
    assert positions == {LIST: 5}
    assert int(redis_client.get(count_key(LIST)) or 0) == 5


def test_a_staged_group_and_runs_pushed_directly_share_one_push(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    redis_client.lpush(LIST, b"older")
    redis_client.incrby(count_key(LIST), 1)
    staged_runs, direct_runs = _runs(3), _runs(2)
    rendered = publisher.render(staged_runs + direct_runs, {7: 3})
    groups = set(publisher.stage(staged_runs, rendered, min_runs=3).values())

    positions = publisher.push(staged_runs + direct_runs, {7: 3}, rendered, list(groups))

    assert redis_client.llen(LIST) == 6
    assert sorted(run for run, _epoch in _pushed_without(redis_client, b"older")) == sorted(
        r.run_id for r in staged_runs + direct_runs
    )
    # The count after the push's last message: the position its batch is recorded at.
    assert positions == {LIST: 6}
    assert int(redis_client.get(count_key(LIST)) or 0) == 6


def _pushed_without(client: redis.Redis, raw: bytes) -> list[tuple[uuid.UUID, int]]:
    client.lrem(LIST, 0, raw)
    return _pushed(client)


def test_fewer_runs_than_the_threshold_are_not_staged(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(4)

    assert publisher.stage(runs, publisher.render(runs, {7: 3}), min_runs=5) == {}
    assert _staging_keys(redis_client) == []


def test_a_group_whose_runs_are_not_all_pushed_is_deleted_and_its_pushed_runs_sent_once(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(5)
    rendered = publisher.render(runs, {7: 3})
    groups = list(set(publisher.stage(runs, rendered, min_runs=5).values()))

    # Two of them held back (a queue bound) or fenced out: not pushed now.
    publisher.push(runs[:3], {7: 3}, rendered, groups)

    assert _pushed(redis_client) == [(r.run_id, 3) for r in runs[:3]]
    assert _staging_keys(redis_client) == []


def test_a_group_staged_under_an_older_epoch_is_deleted_and_its_runs_rendered_again(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(5)
    rendered = publisher.render(runs, {7: 3})
    groups = list(set(publisher.stage(runs, rendered, min_runs=5).values()))

    publisher.push(runs, {7: 4}, rendered, groups)

    assert _pushed(redis_client) == [(r.run_id, 4) for r in runs]
    assert _staging_keys(redis_client) == []


def test_a_staging_list_that_lost_messages_moves_the_first_staged_and_pushes_the_rest(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(6)
    rendered = publisher.render(runs, {7: 3})
    (group,) = set(publisher.stage(runs, rendered, min_runs=6).values())
    # What a Redis restart without its last writes leaves: the oldest messages only.
    redis_client.ltrim(group.key, -2, -1)

    positions = publisher.push(runs, {7: 3}, rendered, [group])

    assert sorted(run for run, _epoch in _pushed(redis_client)) == sorted(r.run_id for r in runs)
    assert [run for run, _epoch in _pushed(redis_client)][:2] == [r.run_id for r in runs[:2]]
    assert positions == {LIST: 6}
    assert int(redis_client.get(count_key(LIST)) or 0) == 6
    assert _staging_keys(redis_client) == []


def test_a_staging_list_gone_altogether_leaves_every_run_to_the_direct_push(
    publisher: Publisher, redis_client: redis.Redis
) -> None:
    runs = _runs(5)
    rendered = publisher.render(runs, {7: 3})
    (group,) = set(publisher.stage(runs, rendered, min_runs=5).values())
    redis_client.delete(group.key)

    publisher.push(runs, {7: 3}, rendered, [group])

    assert sorted(run for run, _epoch in _pushed(redis_client)) == sorted(r.run_id for r in runs)


def _spike_engine(clock: FakeClock, node: str = "node-a", **overrides: object) -> BeatEngine:
    overrides.setdefault("stage_min_runs", 10)
    return make_engine(clock, node, claim_ahead_s=10.0, lookahead_s=30.0, **overrides)


@pytest.mark.django_db(transaction=True)
def test_a_spike_claimed_ahead_is_staged_at_its_claim_and_moved_at_its_instant(
    redis_client: redis.Redis,
) -> None:
    jobs = [job_factory(cron="* * * * *") for _ in range(25)]
    clock = FakeClock(T0)
    engine = _spike_engine(clock)

    clock.advance(INSTANT - timedelta(seconds=5) - clock.now())
    engine.tick()

    assert JobRun.objects.count() == 25
    assert _pushed(redis_client) == []
    staged = _staging_keys(redis_client)
    assert staged
    assert sum(redis_client.llen(key) for key in staged) == 25

    clock.advance(INSTANT - timedelta(milliseconds=1) - clock.now())
    engine.tick()
    assert _pushed(redis_client) == [], "moved before its instant"

    clock.advance(INSTANT - clock.now())
    engine.tick()

    pushed = [run for run, _epoch in _pushed(redis_client)]
    runs = set(JobRun.objects.filter(job__in=jobs).values_list("id", flat=True))
    assert sorted(pushed) == sorted(runs)
    assert _staging_keys(redis_client) == []


@pytest.mark.django_db(transaction=True)
def test_a_node_gone_with_staged_messages_leaves_each_run_to_its_successor_once(
    redis_client: redis.Redis,
) -> None:
    for _ in range(25):
        job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    first = _spike_engine(clock, "node-a")
    clock.advance(INSTANT - timedelta(seconds=5) - clock.now())
    first.tick()
    left = _staging_keys(redis_client)
    assert left
    # Gone without pushing them: its leases released, its staging lists left to expire.
    first.shutdown()

    second = _spike_engine(clock, "node-b")
    second.tick()
    clock.advance(INSTANT - clock.now())
    second.tick()

    pushed = [run for run, _epoch in _pushed(redis_client)]
    assert len(pushed) == len(set(pushed)) == 25
    assert set(pushed) == set(JobRun.objects.values_list("id", flat=True))
    # The successor armed what it found and pushed it; the lists it never staged are not its.
    assert set(_staging_keys(redis_client)) == set(left)
    assert all(redis_client.pttl(key) > 0 for key in left)


@pytest.mark.django_db(transaction=True)
def test_a_spike_whose_staging_lists_redis_lost_is_rendered_again_and_pushed_once(
    redis_client: redis.Redis,
) -> None:
    for _ in range(25):
        job_factory(cron="* * * * *")
    clock = FakeClock(T0)
    engine = _spike_engine(clock)
    clock.advance(INSTANT - timedelta(seconds=5) - clock.now())
    engine.tick()
    # What a Redis restart without persistence leaves of them (the queue is empty anyway).
    redis_client.delete(*_staging_keys(redis_client))

    clock.advance(INSTANT - clock.now())
    engine.tick()

    pushed = [run for run, _epoch in _pushed(redis_client)]
    assert len(pushed) == len(set(pushed)) == 25
    assert set(pushed) == set(JobRun.objects.values_list("id", flat=True))
