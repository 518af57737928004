"""A beat node killed while it holds firings claimed ahead of their instant loses none of
them: the node that takes its partitions over pushes them (docs/engine.md, "Claim ahead")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from beat_engine.clock import SystemClock
from beat_engine.redis_leases import LEASE_KEY
from jobs.models import JobRun
from jobs.states import RunState
from tests.support.beat_nodes import BeatNode, broker_messages, message_args
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "20",
    "SCHEDULER_CLAIM_AHEAD_S": "15",
    # Long enough that only the takeover, not the sweep, can push the dead node's runs in time.
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "30",
    # Every claim ahead stages its messages, however few (beat_engine/broker_staging.py).
    "SCHEDULER_STAGE_MIN_RUNS": "1",
}
PARTITIONS = 64
FIRINGS = 300


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, BeatNode]]:
    started = {name: BeatNode(name, tmp_path, dict(FAST)) for name in ("n1", "n2")}
    yield started
    for node in started.values():
        node.stop()


def _owners(client: redis.Redis) -> dict[int, str | None]:
    values = client.mget([LEASE_KEY.format(partition=p) for p in range(PARTITIONS)])
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def test_runs_claimed_ahead_by_a_killed_node_are_pushed_by_its_successor(
    redis_client: redis.Redis, nodes: dict[str, BeatNode]
) -> None:
    now = SystemClock().now()
    instant = now + timedelta(seconds=18)
    tenant = tenant_factory()
    for _ in range(FIRINGS):
        job_factory(tenant, now=now, run_at=instant)
    n1, n2 = nodes["n1"], nodes["n2"]
    n1.start()
    n2.start()
    ahead = JobRun.objects.filter(state=RunState.QUEUED, published_at__isnull=True)
    wait_until(
        lambda: sorted(Counter(_owners(redis_client).values()).values()) == [32, 32],
        timeout_s=10,
        what="the partitions split between the two nodes",
    )
    wait_until(lambda: ahead.count() == FIRINGS, timeout_s=6, what="every firing claimed ahead")
    assert SystemClock().now() < instant - timedelta(seconds=2)
    held_by_n1 = {p for p, owner in _owners(redis_client).items() if owner == "n1"}
    victims = set(ahead.filter(partition__in=held_by_n1).values_list("id", flat=True))
    assert victims, "n1 held no firing claimed ahead"
    # Their messages wait in staging lists (beat_engine/broker_staging.py) that only the node
    # that staged them moves, and only for partitions it still holds at the instant: whoever
    # pushes a run (n2 for n1's, whichever staged it), it is pushed once.
    assert any(redis_client.scan_iter(match="sched:staged:*")), "nothing staged"
    n1.kill()

    everything = set(JobRun.objects.values_list("id", flat=True))

    def pushed() -> set[str]:
        return {str(message_args(m)[0]) for m in broker_messages(redis_client)}

    wait_until(
        lambda: {str(run) for run in everything} <= pushed(),
        timeout_s=25,
        what="every firing pushed, the killed node's by its successor",
    )
    n2.stop()
    # None lost, one run per firing, and n2 pushed n1's at the instant, not at the sweep
    # (30 s past it): every run is marked published within 5 s of the instant.
    assert JobRun.objects.count() == FIRINGS
    assert not ahead.exists()
    late = JobRun.objects.filter(published_at__gt=instant + timedelta(seconds=5))
    assert not late.exists(), f"{late.count()} pushed late"
    assert len(victims & set(JobRun.objects.values_list("id", flat=True))) == len(victims)
    assert len(broker_messages(redis_client)) == FIRINGS, "a firing pushed more than once"
