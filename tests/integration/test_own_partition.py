"""A worker's start and outcome of a run in its day partition are written through that partition
(jobs/own_partition.py), and every other run still through the parent tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from beat_engine.clock import SystemClock
from jobs import own_partition
from jobs.execution import ExecutionOutcome, run_execute
from jobs.models import ConcurrencyPolicy, Job, JobRun, RunAttempt
from jobs.run_ids import run_id_day, run_id_for
from jobs.run_partitions import ATTEMPT_TABLE, LAYOUT_LOCK_KEY, RUN_TABLE, partition_name
from jobs.services.history_partitions import partition_days, partitions_ensure
from jobs.services.runs import run_heartbeat
from jobs.states import AttemptOutcome, RunState
from tests.support import targets  # noqa: F401  (registers the test targets in this process)
from tests.support.dags import dag_jobs, running, succeed, the_run
from tests.support.factories import job_factory, run_factory
from tests.support.in_process import result_writer_stopped, statements_of  # noqa: F401

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("result_writer_stopped"),
]


@pytest.fixture(autouse=True)
def _fresh_catalogue_reads() -> None:
    # Each test changes the partitions it needs: the process's set is read again.
    own_partition._attached.forget()


def _queued(job: Job, at: datetime) -> JobRun:
    return run_factory(
        job, scheduled_for=at, state=RunState.QUEUED, attempt=1, queued_at=at, due_at=None
    )


def _writes(statements: list[str]) -> list[str]:
    """The statements that write runs: the start's and the outcome's."""
    return [sql for sql in statements if "UPDATE " in sql and "jobs_jobrun" in sql]


def _execute(run: JobRun) -> tuple[ExecutionOutcome, list[str]]:
    return statements_of(lambda: run_execute(run_id=run.id, attempt=1, clock=SystemClock()))


def _now() -> datetime:
    return SystemClock().now()


def _recent_days_partitioned() -> None:
    # Today's and yesterday's: a run of a few seconds ago may be yesterday's just past midnight.
    today = _now().date()
    partitions_ensure([today - timedelta(days=1), today])


def test_a_run_of_today_is_started_and_finished_through_its_day_partitions() -> None:
    _recent_days_partitioned()
    run = _queued(job_factory(target_name="tests.echo"), _now() - timedelta(seconds=5))
    runs, attempts = (partition_name(t, run_id_day(run.id)) for t in (RUN_TABLE, ATTEMPT_TABLE))

    outcome, statements = _execute(run)

    assert outcome == ExecutionOutcome.SUCCEEDED
    writes = _writes(statements)
    assert len(writes) == 2, writes
    start, finish = writes
    assert f"UPDATE {runs} AS r" in start
    assert f"INSERT INTO {attempts} " in start
    assert f"UPDATE {runs} SET" in finish
    assert f"UPDATE {attempts} AS a" in finish
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    attempt = RunAttempt.objects.get(run_id=run.id, attempt=1)
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert attempt.finished_at is not None


def test_a_heartbeat_of_a_run_of_today_is_written_through_its_day_partition() -> None:
    now = _now()
    _recent_days_partitioned()
    run = running(
        job_factory(target_name="tests.echo"), scheduled_for=now - timedelta(seconds=5), now=now
    )
    later = now + timedelta(seconds=10)
    own_partition.reload_attached_days()  # as a worker has, outside the count

    beat, statements = statements_of(lambda: run_heartbeat(run_id=run.id, attempt=1, now=later))

    assert beat.alive
    assert not beat.cancel_requested
    assert len(statements) == 1
    assert f"UPDATE {partition_name(RUN_TABLE, run_id_day(run.id))} SET" in statements[0]
    run.refresh_from_db()
    assert run.heartbeat_at == later
    # A stale attempt is asked of the parent too, and is not alive.
    stale, statements = statements_of(lambda: run_heartbeat(run_id=run.id, attempt=2, now=later))
    assert not stale.alive
    assert "UPDATE jobs_jobrun SET" in statements[-1]


def test_the_day_partitions_carry_the_hand_off_triggers_of_the_runs_table() -> None:
    # A write addressed to a partition fires the partition's own row triggers: those cloned
    # from the parent's (jobs/services/dag_handoff.py) must be there.
    _recent_days_partitioned()
    name = partition_name(RUN_TABLE, _now().date())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
            [name],
        )
        triggers = {row[0] for row in cursor.fetchall()}
    assert {"jobs_run_handoff_insert", "jobs_run_handoff_update"} <= triggers


def test_an_outcome_through_the_day_partition_hands_off_to_the_child_job() -> None:
    now = _now()
    _recent_days_partitioned()
    t = now.replace(microsecond=0) - timedelta(seconds=30)
    jobs = dag_jobs([("a", "b")], now=now)
    parent = running(jobs["a"], scheduled_for=t, now=now)

    _, statements = statements_of(lambda: succeed(parent, now=now))

    assert f"UPDATE {partition_name(RUN_TABLE, t.date())} SET" in _writes(statements)[0]
    child = the_run(jobs["b"], t)
    assert child.state == RunState.PENDING
    assert child.upstream_run_ids == [parent.id]


def test_a_stale_delivery_is_asked_of_the_parent_tables_as_well() -> None:
    _recent_days_partitioned()
    run = _queued(job_factory(target_name="tests.echo"), _now() - timedelta(seconds=5))
    assert _execute(run)[0] == ExecutionOutcome.SUCCEEDED

    outcome, statements = _execute(run)

    assert outcome == ExecutionOutcome.STALE
    starts = [sql for sql in statements if "WITH refused AS" in sql]
    runs = partition_name(RUN_TABLE, run_id_day(run.id))
    assert [f"UPDATE {runs} AS r" in sql for sql in starts] == [True, False]
    assert "UPDATE jobs_jobrun AS r" in starts[1]


def test_a_run_of_a_day_without_partitions_is_written_through_the_parent_tables() -> None:
    # A day with no partition of its own: its runs are in the default partitions.
    day = _now().date() + timedelta(days=400)
    assert day not in partition_days(RUN_TABLE)
    run = _queued(
        job_factory(target_name="tests.echo"), datetime(day.year, day.month, day.day, tzinfo=UTC)
    )

    outcome, statements = _execute(run)

    assert outcome == ExecutionOutcome.SUCCEEDED
    writes = _writes(statements)
    assert len(writes) == 2, writes
    assert all(f"{RUN_TABLE}_p" not in sql for sql in writes), writes


def test_a_partition_dropped_since_the_catalogue_was_read_falls_back_to_the_parent() -> None:
    day = _now().date() + timedelta(days=300)
    partitions_ensure([day])
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    # The process reads the set of attached days while the day's partitions are there.
    assert own_partition.tables_for(run_id_for(at), _now()) != own_partition.PARENTS
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LAYOUT_LOCK_KEY])
        try:
            for table in (ATTEMPT_TABLE, RUN_TABLE):
                name = partition_name(table, day)
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
                cursor.execute(f"DROP TABLE {name} CASCADE")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LAYOUT_LOCK_KEY])
    run = _queued(job_factory(target_name="tests.echo"), at)

    outcome, statements = _execute(run)

    assert outcome == ExecutionOutcome.SUCCEEDED
    writes = _writes(statements)
    # The start tried the partition that is gone, then the parent; the outcome went straight
    # to the parent (the set was read again without the day).
    assert partition_name(RUN_TABLE, day) in writes[0]
    assert all(partition_name(RUN_TABLE, day) not in sql for sql in writes[1:])
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED


def test_a_start_inside_a_transaction_is_written_through_the_parent_tables() -> None:
    # Jobs that forbid overlap start with their job row locked, in a transaction: a failed
    # statement there would end the transaction, so the parent tables are used.
    _recent_days_partitioned()
    job = job_factory(target_name="tests.echo", concurrency_policy=ConcurrencyPolicy.FORBID)
    run = _queued(job, _now() - timedelta(seconds=5))

    outcome, statements = _execute(run)

    assert outcome == ExecutionOutcome.SUCCEEDED
    starts = [sql for sql in statements if "WITH refused AS" in sql]
    runs = partition_name(RUN_TABLE, run_id_day(run.id))
    # The quick path first (it leaves forbid to the locked path), then the locked one.
    assert f"UPDATE {runs} AS r" in starts[0]
    assert "UPDATE jobs_jobrun AS r" in starts[-1]
