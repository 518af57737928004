"""A worker killed mid-run, a zombie's late completion, and effects committed with their key."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from beat_engine.clock import SystemClock
from jobs.models import JobRun
from jobs.services.runs import run_succeed
from jobs.states import AttemptOutcome, RunState
from tests.support import targets
from tests.support.factories import job_factory, run_factory
from tests.support.waiting import wait_until
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    reap_lost_attempt,
    wait_for_state,
    worker_env,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

KILL_QUEUE = "test-kill"


def _now() -> datetime:
    return SystemClock().now()


@pytest.fixture
def kill_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(
        queues=[KILL_QUEUE],
        env=worker_env(allowlist=[]),
        log_path=tmp_path_factory.mktemp("kill") / "worker.log",
        concurrency=1,
    )
    yield worker
    worker.stop()


def test_worker_killed_mid_run_leads_to_one_success_and_refuses_the_zombie(
    kill_worker: CeleryWorker,
) -> None:
    job = job_factory(target_name="tests.block_first_attempt", queue=KILL_QUEUE, now=_now())
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    kill_worker.start()
    publish_run(run.id, 1, KILL_QUEUE)
    wait_for_state(run, RunState.RUNNING, worker=kill_worker)

    kill_worker.kill()
    attempt = reap_lost_attempt(run, now=_now(), queue=KILL_QUEUE)
    kill_worker.start()

    done = wait_for_state(run, RunState.SUCCEEDED, worker=kill_worker)
    assert attempt == 2
    assert done.result == {"attempt": 2}
    assert list(done.attempts.values_list("attempt", "outcome")) == [
        (1, AttemptOutcome.LOST),
        (2, AttemptOutcome.SUCCEEDED),
    ]
    # No stale fence: the killed attempt completing late (a zombie) is refused by the database.
    assert run_succeed(run_id=run.id, attempt=1, now=_now(), result={"zombie": True}) is False
    after = JobRun.objects.get(id=run.id)
    assert (after.state, after.attempt, after.result) == (RunState.SUCCEEDED, 2, {"attempt": 2})
    assert after.attempts.get(attempt=1).outcome == AttemptOutcome.LOST


@pytest.mark.parametrize("critical", [True, False])
def test_effect_and_key_commit_together_across_a_forced_redelivery(
    worker: CeleryWorker, critical: bool
) -> None:
    targets.ensure_side_effects_table()
    job = job_factory(
        target_name="tests.own_key_effect",
        payload={"crash_on_attempt": 1},
        critical=critical,
        now=_now(),
    )
    now = _now()
    run = run_factory(
        job, scheduled_for=now, state=RunState.QUEUED, attempt=1, queued_at=now, due_at=None
    )
    duplicates = worker.metric("scheduler_duplicate_deliveries_total")
    publish_run(run.id, 1)

    # The child dies after committing effect + key; reject_on_worker_lost puts the same message
    # back, and its redelivery finds the run already running at attempt 1: dropped.
    wait_until(
        lambda: worker.metric("scheduler_duplicate_deliveries_total") > duplicates,
        what="the redelivered message to be dropped",
    )
    assert JobRun.objects.get(id=run.id).state == RunState.RUNNING
    reap_lost_attempt(run, now=_now())

    done = wait_for_state(run, RunState.SUCCEEDED, worker=worker)
    assert targets.side_effects() == [(run.dedup_key, 1, "own-key")]
    assert done.attempts.get(attempt=2).outcome == AttemptOutcome.DUPLICATE


def test_idempotent_task_runs_its_effect_once_per_key() -> None:
    targets.ensure_side_effects_table()

    assert targets.charge_order(7) == "charged"
    assert targets.charge_order(7) is None
    assert targets.charge_order(8) == "charged"

    assert [row[0] for row in targets.side_effects()] == ["order-7", "order-8"]
