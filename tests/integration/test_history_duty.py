"""The history duty runs on its own: a real `manage.py beat_engine` node, with a short purge
period, purges expired dedup keys and keeps the one a running run needs, with nobody calling
the purge (beat_engine/history_purger.py, docs/history.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import redis

from beat_engine.clock import SystemClock
from jobs.models import DedupKey, Job, JobRun
from jobs.states import RunState
from tests.support.beat_nodes import BeatNode
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAST = {
    "SCHEDULER_HISTORY_PURGE_S": "0.5",
    "SCHEDULER_LEASE_TTL_S": "5",
    "SCHEDULER_LEASE_RENEW_S": "1",
}


def _keyed_run(job: Job, offset_s: int, state: RunState, **fields: object) -> JobRun:
    now = SystemClock().now()
    run = run_factory(
        job, scheduled_for=now - timedelta(days=10, seconds=offset_s), state=state,
        attempt=1, due_at=None, **fields,
    )  # fmt: skip
    DedupKey.objects.create(
        key=f"{state}-{offset_s}", tenant_id=job.tenant_id, job=job, run=run,
        created_at=now - timedelta(days=8), expires_at=now - timedelta(days=1),
    )  # fmt: skip
    return run


def test_the_beat_node_purges_expired_keys_by_itself(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    now = SystemClock().now()
    job = job_factory(now=now, critical=True)
    for i in range(3):
        _keyed_run(job, i, RunState.SUCCEEDED, finished_at=now - timedelta(days=9))
    _keyed_run(
        job, 9, RunState.RUNNING, started_at=now, lease_until=now + timedelta(hours=1)
    )  # a live run: its key stays
    node = BeatNode("history", tmp_path, dict(FAST))
    node.start()
    try:
        wait_until(
            lambda: set(DedupKey.objects.values_list("key", flat=True)) == {"running-9"},
            timeout_s=30,
            what="the node's history duty to purge the expired keys",
        )
        wait_until(lambda: bool(node.events("beat.history_purged")), timeout_s=10)
    finally:
        node.stop()

    (event,) = node.events("beat.history_purged")[:1]
    assert event["jobs_dedupkey"] == 3
