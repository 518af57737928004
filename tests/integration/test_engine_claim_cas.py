"""The claim's compare-and-set: a job changed between the claim's read and its write is left
alone, whoever changed it, and the engine reloads it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection
from django.db.models import F

from beat_engine import claims
from beat_engine.claims import claim_due_batch
from beat_engine.fencing import epoch_take
from beat_engine.heap import DueEntry
from jobs.models import Job, JobRun, JobStatus
from tests.support.beat_nodes import broker_messages, make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MOVED = T0 + timedelta(hours=1)


def _move(job: Job) -> None:
    Job.objects.filter(id=job.id).update(next_fire_at=MOVED, version=F("version") + 1)


def _pause(job: Job) -> None:
    Job.objects.filter(id=job.id).update(status=JobStatus.PAUSED, version=F("version") + 1)


def _edit_between_read_and_write(
    monkeypatch: pytest.MonkeyPatch, job: Job, edit: Callable[[Job], None]
) -> None:
    """Run ``edit`` on another connection after the claim read its rows, before it writes.

    No row lock is held by then, so the edit commits at once (it would have waited for the
    claim under the old SELECT ... FOR UPDATE).
    """
    original = claims._plan_rows

    def edited_after_read(batch: Any, rows: Sequence[Sequence[object]], *args: Any) -> None:
        original(batch, rows, *args)

        def other_connection() -> None:
            edit(job)
            connection.close()

        thread = threading.Thread(target=other_connection)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the edit waited for a lock the claim should not hold"

    monkeypatch.setattr(claims, "_plan_rows", edited_after_read)


@pytest.mark.parametrize("edit", [_move, _pause], ids=["next_fire_at-moved", "paused"])
def test_claim_refuses_a_job_changed_after_it_was_read(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, edit: Callable[[Job], None]
) -> None:
    job = job_factory(interval=timedelta(seconds=10))
    other = job_factory(interval=timedelta(seconds=10))
    epochs = {
        p: epoch_take(partition=p, node="n", now=T0) for p in {job.partition, other.partition}
    }
    now = T0 + timedelta(seconds=10)
    entries = [DueEntry(now, j.id, j.partition) for j in (job, other)]
    _edit_between_read_and_write(monkeypatch, job, edit)

    result = claim_due_batch(entries, epochs=epochs, now=now)

    assert result.refused == [job.id]
    assert result.claimed == 1
    assert [run.run_id for run in result.queued] == list(
        JobRun.objects.filter(job=other).values_list("id", flat=True)
    )
    assert not JobRun.objects.filter(job=job).exists()
    assert job.id not in {e.job_id for e in result.next_due}
    edited = Job.objects.get(id=job.id)
    # The edit stands: the claim wrote nothing over it.
    assert edited.version == job.version + 1
    assert edited.last_fire_at is None


def test_engine_reloads_a_refused_job_at_its_new_instant(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_factory(interval=timedelta(seconds=10))
    clock = FakeClock(T0)
    engine = make_engine(clock, lookahead_s=7200.0)
    engine.tick()
    _edit_between_read_and_write(monkeypatch, job, _move)
    clock.advance(timedelta(seconds=10))
    engine.tick()

    assert not JobRun.objects.filter(job=job).exists()
    assert broker_messages(redis_client) == []
    entry = engine.heap.peek()
    assert entry is not None
    assert (entry.job_id, entry.due_at) == (job.id, MOVED)
