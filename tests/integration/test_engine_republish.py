"""The sweep sends a queued run again only when its message is really gone from the broker.

While no worker consumes, each queued run keeps exactly one message however many sweep
periods pass (bounded redelivery, docs/architecture.md, Invariants); a message lost with
Redis's keys, or taken by a worker that never started the run, is sent again within
republish_after_s plus a sweep period (Redis is a hint).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection

from beat_engine.publisher import queue_key
from beat_engine.sweep import SWEEP_SQL, sweep_params
from jobs.models import Job, JobRun
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.plans import copy_job, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REPUBLISH_AFTER = timedelta(seconds=60)


def _queued_runs(*batches: int) -> tuple[Any, list[JobRun]]:
    """Runs claimed and pushed one batch a second (sizes ``batches``), none started."""
    tenant = tenant_factory()
    jobs = []
    for second, size in enumerate(batches, start=1):
        batch = [job_factory(tenant, interval=timedelta(hours=1)) for _ in range(size)]
        due = T0 + timedelta(seconds=second)
        Job.objects.filter(id__in=[j.id for j in batch]).update(next_fire_at=due)
        jobs += batch
    clock = FakeClock(T0)
    engine = make_engine(clock, republish_after_s=60.0)
    for _ in range(len(batches) + 2):
        engine.tick()
        clock.advance(timedelta(seconds=1))
    runs = list(JobRun.objects.filter(job__in=jobs))
    assert len(runs) == sum(batches)
    assert all(r.published_at is not None for r in runs)
    return (clock, engine), runs


def _sent_run_ids(client: redis.Redis) -> list[str]:
    return sorted(message_args(m)[0] for m in broker_messages(client))


def test_backlog_keeps_one_message_per_queued_run_through_many_sweeps(
    redis_client: redis.Redis,
) -> None:
    (clock, engine), runs = _queued_runs(20)
    ids = sorted(str(r.id) for r in runs)
    assert _sent_run_ids(redis_client) == ids
    for _ in range(5):
        clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
        engine.tick()
        # No worker consumes: the messages wait, and none is sent again.
        assert _sent_run_ids(redis_client) == ids
    # Each run was looked at and re-stamped, so it is looked at again a period later.
    stamped = JobRun.objects.filter(id__in=[r.id for r in runs]).values_list("published_at")
    assert all(clock.now() <= at < clock.now() + timedelta(seconds=1) for (at,) in stamped)


def test_messages_lost_with_redis_keys_are_sent_again_once(redis_client: redis.Redis) -> None:
    (clock, engine), runs = _queued_runs(20)
    ids = sorted(str(r.id) for r in runs)
    clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
    engine.tick()
    redis_client.flushdb()  # the broker restarted without persistence,
    redis_client.script_flush()  # which empties its script cache too
    clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
    engine.tick()
    assert _sent_run_ids(redis_client) == ids
    for _ in range(2):
        clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
        engine.tick()
        assert _sent_run_ids(redis_client) == ids


def test_messages_a_worker_took_and_never_started_are_sent_again(
    redis_client: redis.Redis,
) -> None:
    (clock, engine), runs = _queued_runs(5, 5, 5, 5)
    oldest_first = [message_args(m)[0] for m in broker_messages(redis_client)]
    # A worker takes the first batch and two of the second, then dies before starting them.
    key = queue_key("scheduler", runs[0].job.priority)
    taken = [json.loads(redis_client.rpop(key) or b"{}") for _ in range(7)]
    assert [message_args(m)[0] for m in taken] == oldest_first[:7]
    clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
    engine.tick()
    waiting = oldest_first[7:]
    # The whole first batch left the list: sent again. The second batch still has messages
    # waiting, so its two taken runs wait until the rest of their batch is consumed.
    assert _sent_run_ids(redis_client) == sorted(waiting + oldest_first[:5])
    for _ in range(8):  # another worker consumes the next eight, and starts them
        redis_client.rpop(key)
    started = oldest_first[7:15]
    JobRun.objects.filter(id__in=started).update(
        state=RunState.RUNNING, started_at=T0, lease_until=T0 + timedelta(hours=1)
    )
    clock.advance(REPUBLISH_AFTER + timedelta(seconds=1))
    engine.tick()
    assert set(oldest_first[5:7]) <= set(_sent_run_ids(redis_client))
    queued = JobRun.objects.filter(state=RunState.QUEUED).values_list("id", flat=True)
    # Still one message for every run that no worker started, and none for the others.
    assert sorted(set(_sent_run_ids(redis_client))) == sorted(str(i) for i in queued)


SEED_RUNS_SQL = """
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
    due_at, attempt, epoch, dedup_key, worker, cancel_requested, queued_at, published_at,
    started_at, finished_at, last_error, replayed_count, created_at)
SELECT jobs_run_id(%(t0)s + i * interval '1 second'), jobs.ids[1 + i %% cardinality(jobs.ids)],
       %(tenant)s, i %% 64,
       %(t0)s + i * interval '1 second', 'schedule', s.state, NULL, 1, 1, md5(i::text), '',
       false, %(t0)s + i * interval '1 second',
       CASE WHEN s.state = 'queued' AND i %% 3 = 0 THEN NULL
            ELSE %(t0)s + i * interval '1 second' END,
       CASE WHEN s.state = 'succeeded' THEN %(t0)s + i * interval '1 second' END,
       CASE WHEN s.state = 'succeeded' THEN %(t0)s + i * interval '1 second' END,
       '', 0, %(t0)s
  FROM generate_series(1, %(count)s) AS i,
       (SELECT array_agg(id) AS ids FROM jobs_job) jobs,
       LATERAL (SELECT CASE WHEN i %% 20 = 0 THEN 'queued' ELSE 'succeeded' END AS state) s
"""


def test_sweep_reads_both_kinds_of_lost_publish_from_indexes() -> None:
    """With realistic tables (5,000 jobs, 60,000 runs of which 5% queued), the sweep's query
    is two index range scans and a primary-key lookup per run kept, never a sequential scan
    of jobs_jobrun or jobs_job (docs/engine.md "Sweep" shows this plan)."""
    job = job_factory(interval=timedelta(hours=1))
    # Copies of the job, so jobs_job is as big as a real one.
    copy_job(job.id, 5_000)
    with connection.cursor() as cursor:
        cursor.execute(SEED_RUNS_SQL, {"tenant": job.tenant_id, "t0": T0, "count": 60_000})
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_jobrun")
        params = sweep_params(
            list(range(64)),
            now=T0 + timedelta(days=2),
            unpublished_after=timedelta(seconds=30),
            republish_after=REPUBLISH_AFTER,
            limit=1000,
        )
        cursor.execute("EXPLAIN (FORMAT JSON) " + SWEEP_SQL, params)
        (plan,) = cursor.fetchone()[0]
        # The runs table is partitioned (docs/history.md, "Partitions"): each partition's
        # index is named after its partition, attached to the parent's index of that name;
        # a partition with no rows may be scanned, which reads nothing.
        cursor.execute(
            "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE c.relkind = 'i'"
        )
        parent_index = dict(cursor.fetchall())
        cursor.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND reltuples = 0")
        empty = {row[0] for row in cursor.fetchall()}
    nodes = plan_nodes(plan["Plan"])
    scans = {(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes}
    assert not [s for s in scans if s[0] == "Seq Scan" and s[1] not in empty], scans
    indexes = {parent_index.get(s[2], s[2]) for s in scans}
    assert {"run_sent_unstarted", "run_unpublished_by_partition"} <= indexes, scans
