"""A change of SCHEDULER_PARTITIONS: engines refuse to start until the jobs are moved by
`manage.py repartition_jobs`, after which every job fires under the new count."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from beat_engine.layout import layout_ensure, layout_problem
from beat_engine.partitions import partition_for
from beat_engine.redis_leases import RedisLeaseStore
from jobs.models import Job, JobRun, PartitionEpoch
from tests.support.beat_nodes import BeatNode
from tests.support.factories import T0, dead_run_factory, job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OLD, NEW = 64, 8
JOBS = 40


@pytest.fixture
def jobs() -> list[Job]:
    tenant = tenant_factory()
    made = [job_factory(tenant, interval=timedelta(hours=1), anchor_at=T0) for _ in range(JOBS)]
    assert any(job.partition >= NEW for job in made), "some jobs beyond the new count"
    return made


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BeatNode]:
    beat = BeatNode("layout-node", tmp_path, env_overrides={"SCHEDULER_PARTITIONS": str(NEW)})
    yield beat
    beat.stop()


def _due_now(jobs: list[Job]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET next_fire_at = clock_timestamp() + interval '1 second' "
            "WHERE id = ANY(%s::uuid[])",
            [[job.id for job in jobs]],
        )


def test_engine_with_a_changed_partition_count_refuses_to_start_and_fires_nothing(
    redis_client: redis.Redis, jobs: list[Job], node: BeatNode
) -> None:
    layout_ensure(OLD)  # what the engines of the old count recorded at their start
    _due_now(jobs)
    node.start()
    assert node.process is not None
    code = node.process.wait(timeout=60)
    log = node.log_path.read_text()
    assert code != 0
    assert f"SCHEDULER_PARTITIONS is {NEW}, but the jobs are spread over {OLD}" in log
    assert f"repartition_jobs --partitions {NEW}" in log
    assert not JobRun.objects.exists()
    assert not node.events("beat.start")


def test_jobs_beyond_the_count_are_refused_even_without_a_recorded_layout(
    jobs: list[Job],
) -> None:
    highest = max(job.partition for job in jobs)
    problem = layout_problem(NEW)
    assert problem is not None
    assert f"active jobs are in partitions up to {highest}" in problem
    assert layout_problem(OLD) is None


def test_repartitioned_jobs_move_with_their_runs_and_fire_under_the_new_count(
    redis_client: redis.Redis, jobs: list[Job], node: BeatNode
) -> None:
    layout_ensure(OLD)
    moved = next(job for job in jobs if job.partition >= NEW)
    old_run = dead_run_factory(moved, scheduled_for=T0)
    out, err = StringIO(), StringIO()
    call_command("repartition_jobs", partitions=NEW, batch=7, stdout=out, stderr=err)

    assert f"{JOBS}/{JOBS} jobs" in err.getvalue()
    assert f"spread over {NEW} partitions" in out.getvalue()
    for job in Job.objects.filter(id__in=[j.id for j in jobs]):
        assert job.partition == partition_for(job.id, NEW)
    assert JobRun.objects.get(id=old_run.id).partition == partition_for(moved.id, NEW)
    assert sorted(PartitionEpoch.objects.values_list("partition", flat=True)) == list(range(NEW))
    assert layout_problem(NEW) is None
    assert layout_problem(OLD) is not None

    _due_now(jobs)
    node.start()
    # Jobs, not runs: within claim_ahead_s of the next hour the node claims that firing too.
    fired = JobRun.objects.filter(job__in=jobs, scheduled_for__gt=T0).values("job").distinct()
    wait_until(
        lambda: fired.count() == JOBS, timeout_s=60, what="every job fired under the new count"
    )


def test_repartition_refuses_while_an_engine_runs_and_changes_nothing(
    redis_client: redis.Redis, jobs: list[Job]
) -> None:
    layout_ensure(OLD)
    RedisLeaseStore(redis_client).heartbeat("still-running", 10_000)
    with pytest.raises(CommandError, match="still-running"):
        call_command("repartition_jobs", partitions=NEW, stdout=StringIO(), stderr=StringIO())
    assert {job.partition for job in Job.objects.all()} == {job.partition for job in jobs}
    assert PartitionEpoch.objects.count() == OLD


@pytest.mark.parametrize("bad", [0, -1, 40000])
def test_repartition_refuses_a_bad_count(bad: int) -> None:
    with pytest.raises(CommandError, match="--partitions"):
        call_command("repartition_jobs", partitions=bad, stdout=StringIO(), stderr=StringIO())


def test_system_check_flags_a_layout_that_is_not_the_setting(
    redis_client: redis.Redis, jobs: list[Job]
) -> None:
    call_command("check", databases=["default"], stdout=StringIO())
    call_command("repartition_jobs", partitions=NEW, stdout=StringIO(), stderr=StringIO())
    with pytest.raises(SystemCheckError, match=r"jobs\.E006"):
        call_command("check", databases=["default"], stdout=StringIO(), stderr=StringIO())
