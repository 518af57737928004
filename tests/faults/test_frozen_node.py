"""A node frozen (SIGSTOP) in the middle of a claim transaction, holding its partitions' fence
row locks: PostgreSQL ends its session, so the node that takes over is not blocked for ever
(docs/engine.md, "A frozen node").

Without the engine's idle-in-transaction limit the newcomer's epoch_take waits on the frozen
transaction's row locks until the frozen process resumes, which may be never.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from beat_engine.clock import SystemClock
from jobs.models import JobRun, PartitionEpoch
from tests.support.beat_nodes import BeatNode, pause_s
from tests.support.factories import job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

PARTITIONS = 64
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_ENGINE_IDLE_TX_TIMEOUT_S": "3",
}

# Another session's transaction, idle between two statements, that holds partition epoch
# rows: a claim or timer transaction after its fence (the fence updates the rows it locks, so
# their current version carries the transaction's id as xmax until it ends).
_IDLE_WRITERS = """
SELECT a.pid, a.backend_xid::text FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
   AND a.state = 'idle in transaction' AND a.backend_xid IS NOT NULL
   AND EXISTS (SELECT 1 FROM jobs_partitionepoch pe WHERE pe.xmax = a.backend_xid)
"""


CATCH_WITHIN_S = 60.0


def _idle_writers() -> set[tuple[int, str]]:
    with connection.cursor() as cursor:
        cursor.execute(_IDLE_WRITERS)
        return {(int(pid), str(xid)) for pid, xid in cursor.fetchall()}


def _freeze_inside_a_transaction(node: BeatNode) -> None:
    """SIGSTOP the node at a moment one of its transactions is open, and leave it stopped."""
    assert node.process is not None
    # A deadline, not a count of tries: on a loaded machine the node may take seconds to start
    # claiming, and 2,000 tries of a few ms each once ran out before it did.
    clock = SystemClock()
    deadline = clock.monotonic() + CATCH_WITHIN_S
    while clock.monotonic() < deadline:
        if _idle_writers():
            os.kill(node.process.pid, signal.SIGSTOP)
            # Still open after the stop, so the frozen process holds it (and its row locks).
            if _idle_writers():
                return
            os.kill(node.process.pid, signal.SIGCONT)
        pause_s(0.002)
    raise AssertionError("never caught the node inside a transaction")


@pytest.fixture
def frozen_and_fresh(tmp_path: Path) -> Iterator[tuple[BeatNode, BeatNode]]:
    frozen = BeatNode("frozen", tmp_path, dict(FAST))
    fresh = BeatNode("fresh", tmp_path, dict(FAST))
    yield frozen, fresh
    for node in (frozen, fresh):
        node.stop()


def test_a_node_frozen_inside_its_claim_transaction_does_not_block_the_takeover(
    frozen_and_fresh: tuple[BeatNode, BeatNode],
) -> None:
    now = SystemClock().now()
    tenant = tenant_factory()
    for _ in range(300):
        job_factory(tenant, now=now, interval=timedelta(seconds=1))
    frozen, fresh = frozen_and_fresh
    frozen.start()
    wait_until(
        lambda: PartitionEpoch.objects.filter(owner="frozen").count() == PARTITIONS,
        timeout_s=30,
        what="the first node to own every partition",
    )
    wait_until(lambda: JobRun.objects.exists(), timeout_s=30, what="the first node to fire")
    _freeze_inside_a_transaction(frozen)

    fresh.start()
    wait_until(
        lambda: PartitionEpoch.objects.filter(owner="fresh").count() == PARTITIONS,
        timeout_s=30,
        what="the fresh node to take every partition over from the frozen one",
    )
    taken_at = SystemClock().now()
    wait_until(
        lambda: JobRun.objects.filter(queued_at__gt=taken_at).exists(),
        timeout_s=30,
        what="the fresh node to fire",
    )
    # Resumed, the frozen node finds that PostgreSQL ended its session (the transaction it
    # held was rolled back, never committed late) and carries on through a fresh connection.
    frozen.resume()
    wait_until(
        lambda: bool(frozen.events("beat.database_lost") + frozen.events("beat.tick_failed")),
        timeout_s=30,
        what="the resumed node to find its session gone",
    )
