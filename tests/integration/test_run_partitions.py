"""The run history's day partitions on real PostgreSQL (docs/history.md, "Partitions"): ids
agree between Python and SQL, lookups by id touch one partition, partitions are created ahead
and on demand, race-safely, and a day already in the default partition stays there."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import pytest
from django.db import IntegrityError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from beat_engine.history_purger import HistoryPurger
from jobs.execution import ExecutionOutcome, run_execute
from jobs.models import JobRun, RunAttempt
from jobs.run_ids import instant_ms, run_id_ceil, run_id_floor, run_id_for, run_id_ms
from jobs.run_partitions import (
    ATTEMPT_TABLE,
    RUN_ID_CHECK_NAME,
    RUN_ID_CHECK_SQL,
    RUN_TABLE,
    partition_name,
)
from jobs.services import starts
from jobs.services.history_partitions import (
    partition_days,
    partitions_ensure,
    partitions_ensure_ahead,
)
from jobs.services.runs import run_heartbeat, run_succeed
from jobs.states import RunState
from tests.support.clock import FakeClock
from tests.support.factories import job_factory, run_factory
from tests.support.partition_reads import drop_day_partitions, partitions_touched
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

DAY = date(2031, 3, 10)
NOON = datetime(2031, 3, 10, 12, tzinfo=UTC)


def _where(run_id: UUID, table: str = RUN_TABLE) -> str:
    with connection.cursor() as cursor:
        key = "id" if table == RUN_TABLE else "run_id"
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE {key} = %s", [run_id])
        return str(cursor.fetchone()[0])


# Instants from 1900 to 9999 in UTC, each example one or two queries on the test database.
_INSTANTS = st.datetimes(
    min_value=datetime(1900, 1, 1),  # noqa: DTZ001 - naive bounds, UTC instants
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.just(UTC),
)
_DATABASE_EXAMPLES = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def drop_days() -> Iterator[list[date]]:
    """Days whose partitions a committing test created, dropped again after it (DDL outlives
    a test that commits)."""
    days: list[date] = []
    yield days
    drop_day_partitions(days)


@pytest.mark.django_db
@_DATABASE_EXAMPLES
@given(_INSTANTS)
def test_python_and_sql_agree_on_every_instants_range(instant: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jobs_run_id_floor(%s), jobs_run_id_ceil(%s), jobs_run_id(%s)",
            [instant, instant, instant],
        )
        floor, ceil, drawn = cursor.fetchone()
    assert (floor, ceil) == (run_id_floor(instant), run_id_ceil(instant))
    assert floor <= drawn <= ceil
    assert drawn.version == 7
    assert floor <= run_id_for(instant) <= ceil


@pytest.mark.django_db
def test_the_run_id_functions_are_inlined_where_they_are_called() -> None:
    # Not inlined, a SQL function's body is parsed and planned again in every statement that
    # calls it: the run_id_matches_firing CHECK at every insert and update of a run.
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (VERBOSE) SELECT jobs_run_id_floor(scheduled_for), "
            "jobs_run_id_ceil(scheduled_for) FROM jobs_jobrun"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "EXTRACT(epoch" in plan
    assert "jobs_run_id" not in plan
    # And inlined from a stored parse tree: a body stored as text is parsed at every inlining.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname FROM pg_proc WHERE proname IN "
            "('jobs_run_id_ms', 'jobs_run_id_floor', 'jobs_run_id_ceil') "
            "AND prosqlbody IS NOT NULL ORDER BY proname"
        )
        stored = [name for (name,) in cursor.fetchall()]
    assert stored == ["jobs_run_id_ceil", "jobs_run_id_floor", "jobs_run_id_ms"]


@pytest.mark.django_db
def test_the_run_id_functions_do_not_depend_on_the_sessions_time_zone() -> None:
    instant = datetime(2031, 3, 10, 23, 59, 59, 999_999, tzinfo=UTC)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL TimeZone = 'Pacific/Kiritimati'")
        cursor.execute("SELECT jobs_run_id_floor(%s), jobs_run_id_ceil(%s)", [instant, instant])
        assert cursor.fetchone() == (run_id_floor(instant), run_id_ceil(instant))


# An id's prefix: an offset from the firing's millisecond, or one of the ends of the 48-bit
# range, where the clamp of instants before 1970 and after year 10889 decides.
_ID_PREFIXES = st.tuples(st.just("offset"), st.sampled_from([-1, 0, 1])) | st.tuples(
    st.just("prefix"), st.sampled_from([0, 1, 2**48 - 2, 2**48 - 1])
)


@pytest.mark.django_db
@_DATABASE_EXAMPLES
@given(
    _INSTANTS,
    _ID_PREFIXES,
    st.sampled_from([0, 2**80 - 1]) | st.integers(0, 2**80 - 1),
)
def test_the_run_id_check_accepts_exactly_the_ids_of_the_firings_millisecond(
    instant: datetime, prefix: tuple[str, int], tail: int
) -> None:
    kind, value = prefix
    ms = min(max(instant_ms(instant) + value, 0), 2**48 - 1) if kind == "offset" else value
    run_id = UUID(int=(ms << 80) | tail)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {RUN_ID_CHECK_SQL}, id BETWEEN jobs_run_id_floor(scheduled_for)"
            " AND jobs_run_id_ceil(scheduled_for)"
            " FROM (VALUES (%s::uuid, %s::timestamptz)) AS v(id, scheduled_for)",
            [run_id, instant],
        )
        check, old_form = cursor.fetchone()
    assert check == old_form == (run_id_ms(run_id) == instant_ms(instant))


@pytest.mark.django_db
def test_the_run_id_check_reads_no_function_body_and_is_the_one_installed() -> None:
    # PostgreSQL prepares the CHECK in every statement that writes a run: a function of ours
    # in it is a body read and inlined each time. pg_depend records a constraint's functions
    # other than the built-in ones, whose rows are pinned.
    partitions_ensure([DAY])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.conrelid::regclass::text, c.convalidated, pg_get_constraintdef(c.oid),"
            " (SELECT count(*) FROM pg_depend d WHERE d.classid = 'pg_constraint'::regclass"
            "    AND d.objid = c.oid AND d.refclassid = 'pg_proc'::regclass)"
            " FROM pg_constraint c WHERE c.conname = %s",
            [RUN_ID_CHECK_NAME],
        )
        installed = {table: rest for table, *rest in cursor.fetchall()}
        # The text this code holds, as PostgreSQL prints it, to compare with the installed one.
        cursor.execute(
            "CREATE TEMP TABLE run_id_check_form (id uuid, scheduled_for timestamptz,"
            f" CHECK ({RUN_ID_CHECK_SQL}))"
        )
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'run_id_check_form'::regclass"
        )
        (expected,) = cursor.fetchone()
    assert {RUN_TABLE, partition_name(RUN_TABLE, DAY), f"{RUN_TABLE}_default"} <= set(installed)
    assert set(map(tuple, installed.values())) == {(True, expected, 0)}


_SAME_COLUMNS_SQL = """
SELECT c.relname, i.indexrelid::regclass::text, i.indisunique, array_agg(a.attname ORDER BY k.n)
  FROM pg_index AS i
  JOIN pg_class AS c ON c.oid = i.indrelid
  JOIN pg_am AS am ON am.oid = (SELECT relam FROM pg_class WHERE oid = i.indexrelid)
  CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
  JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.attnum
 WHERE c.relname = ANY(%s) AND am.amname = 'btree' AND i.indpred IS NULL
   AND i.indexprs IS NULL
 GROUP BY c.relname, i.indexrelid, i.indisunique
"""


@pytest.mark.django_db
def test_no_index_of_runs_or_attempts_repeats_the_leading_columns_of_another() -> None:
    # Every index is one more entry to write at every claim, start and outcome (a run's state
    # changes are never HOT): one whose columns lead another index serves no read that the
    # other does not, and only costs. Directions are not compared: a btree is read backwards
    # as well as forwards, and the readers of these tables fix the leading columns (a job, a
    # run) and order by the next one.
    partitions_ensure([DAY])
    tables = [partition_name(RUN_TABLE, DAY), partition_name(ATTEMPT_TABLE, DAY),
              f"{RUN_TABLE}_default", f"{ATTEMPT_TABLE}_default"]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_SAME_COLUMNS_SQL, [tables])
        indexes = cursor.fetchall()
    assert {table for table, *_ in indexes} == set(tables)
    repeats = [
        (name, other)
        for table, name, unique, columns in indexes
        for other_table, other, _, other_columns in indexes
        if other_table == table and other != name and not unique
        and len(columns) <= len(other_columns)
        and other_columns[: len(columns)] == columns
    ]  # fmt: skip
    assert repeats == []


@pytest.mark.django_db
def test_a_run_gets_its_id_from_its_firing_and_lands_in_its_days_partition() -> None:
    partitions_ensure([DAY - timedelta(days=1), DAY, DAY + timedelta(days=1)])
    run = run_factory(job_factory(), scheduled_for=NOON)
    assert run_id_floor(NOON) <= run.id <= run_id_ceil(NOON)
    assert _where(run.id) == "jobs_jobrun_p20310310"
    attempt = RunAttempt.objects.create(run=run, attempt=1)
    assert _where(attempt.run_id, ATTEMPT_TABLE) == "jobs_runattempt_p20310310"
    # A day without a partition: the default partition takes it.
    far = run_factory(run.job, scheduled_for=datetime(2999, 1, 1, tzinfo=UTC))
    assert _where(far.id) == "jobs_jobrun_default"


@pytest.mark.django_db
def test_an_id_not_derived_from_the_firing_is_refused() -> None:
    job = job_factory()
    with pytest.raises(IntegrityError, match="run_id_matches_firing"), transaction.atomic():
        run_factory(job, scheduled_for=NOON, id=run_id_for(NOON + timedelta(days=1)))


@pytest.mark.django_db
@pytest.mark.parametrize("day_partition", [True, False], ids=["day partition", "default"])
def test_the_unique_firing_key_holds_in_day_and_default_partitions(day_partition: bool) -> None:
    if day_partition:
        partitions_ensure([DAY])
    job = job_factory()
    run_factory(job, scheduled_for=NOON)
    with pytest.raises(IntegrityError, match="_firing"), transaction.atomic():
        run_factory(job, scheduled_for=NOON)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                state, due_at, attempt, epoch, dedup_key, worker, cancel_requested, last_error,
                replayed_count, created_at)
            VALUES (jobs_run_id(%(t)s), %(job)s, %(tenant)s, 0, %(t)s, 'schedule', 'pending',
                %(t)s, 0, 0, 'k', '', false, '', 0, %(t)s)
            ON CONFLICT DO NOTHING
            """,
            {"t": NOON, "job": job.id, "tenant": job.tenant_id},
        )
        assert cursor.rowcount == 0
    assert JobRun.objects.filter(job=job, scheduled_for=NOON).count() == 1


@pytest.mark.django_db
def test_a_lookup_by_id_touches_one_partition() -> None:
    days = [DAY + timedelta(days=n) for n in range(-3, 4)]
    partitions_ensure(days)
    job = job_factory()
    runs = [
        run_factory(job, scheduled_for=datetime.combine(day, NOON.timetz()), **queued)
        for day in days
        for queued in [{"state": RunState.QUEUED, "attempt": 1, "queued_at": NOON}]
    ]
    run = runs[3]
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {RUN_TABLE}; ANALYZE {ATTEMPT_TABLE}")
    only_its_day = {partition_name(RUN_TABLE, DAY)}

    assert partitions_touched(lambda: JobRun.objects.get(id=run.id)) == only_its_day
    # The worker's statements, by id: start (the run and its attempt), heartbeat, outcome.
    started = partitions_touched(
        lambda: starts.run_start(run_id=run.id, attempt=1, worker="w", now=NOON)
    )
    assert started <= only_its_day | {partition_name(ATTEMPT_TABLE, DAY)}
    assert partition_name(RUN_TABLE, DAY) in started
    assert (
        partitions_touched(lambda: run_heartbeat(run_id=run.id, attempt=1, now=NOON))
        == only_its_day
    )
    # A run without a running limit frees no slot (jobs/execution.py: run.limited).
    finished = partitions_touched(
        lambda: run_succeed(run_id=run.id, attempt=1, now=NOON, release_slot=False)
    )
    assert finished <= only_its_day | {partition_name(ATTEMPT_TABLE, DAY)}
    assert JobRun.objects.get(id=run.id).state == RunState.SUCCEEDED


@pytest.mark.django_db
def test_partitions_are_created_ahead_once() -> None:
    first = partitions_ensure_ahead(DAY, 3)
    assert first.created == [DAY + timedelta(days=n) for n in range(4)]
    for table in (RUN_TABLE, ATTEMPT_TABLE):
        assert set(first.created) <= partition_days(table)
    again = partitions_ensure_ahead(DAY, 3)
    assert (again.created, again.in_default, again.busy) == ([], [], [])


@pytest.mark.django_db
def test_a_day_whose_rows_are_in_the_default_stays_there() -> None:
    job = job_factory()
    run = run_factory(job, scheduled_for=NOON)
    assert _where(run.id) == "jobs_jobrun_default"

    def in_default() -> float:
        value = REGISTRY.get_sample_value(
            "scheduler_history_partition_days_total", {"outcome": "in_default"}
        )
        return value or 0.0

    before = in_default()
    report = partitions_ensure([DAY - timedelta(days=1), DAY])
    assert report.created == [DAY - timedelta(days=1)]
    assert report.in_default == [DAY]
    assert in_default() == before + 1
    assert DAY not in partition_days(RUN_TABLE)
    # Its rows are where they were, still unique.
    assert _where(run.id) == "jobs_jobrun_default"
    with pytest.raises(IntegrityError), transaction.atomic():
        run_factory(job, scheduled_for=NOON)


@pytest.mark.django_db(transaction=True)
def test_two_nodes_creating_the_same_days_at_once_create_each_once(drop_days: list[date]) -> None:
    days = [DAY + timedelta(days=100 + n) for n in range(5)]
    drop_days.extend(days)
    barrier = threading.Barrier(2)
    created: list[list[date]] = []
    errors: list[BaseException] = []

    def node() -> None:
        try:
            barrier.wait()
            created.append(partitions_ensure(days, lock_timeout_ms=30_000).created)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=node) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(created[0] + created[1]) == days
    assert set(days) <= partition_days(RUN_TABLE) & partition_days(ATTEMPT_TABLE)


@pytest.mark.django_db(transaction=True)
def test_the_history_duty_creates_the_days_ahead(drop_days: list[date]) -> None:
    start = NOON + timedelta(days=200)
    drop_days.extend(start.date() + timedelta(days=n) for n in range(3))
    clock = FakeClock(start)
    purger = HistoryPurger(clock=clock, node_id="history-test", ahead_days=2)
    try:
        purger.request()
        wait_until(lambda: purger.passes >= 1, timeout_s=30, what="a history pass")
    finally:
        purger.close()
    assert set(drop_days) <= partition_days(RUN_TABLE) & partition_days(ATTEMPT_TABLE)


@pytest.mark.django_db
def test_a_message_naming_a_run_that_no_longer_exists_is_dropped() -> None:
    """What a worker does with a message sent before migration 0012 gave its run a new id."""
    job = job_factory()
    run = run_factory(job, scheduled_for=NOON, state=RunState.QUEUED, attempt=1, queued_at=NOON)
    old_id = uuid.uuid4()
    outcome = run_execute(run_id=old_id, attempt=1, clock=FakeClock(NOON))
    assert outcome == ExecutionOutcome.STALE
    run.refresh_from_db()
    assert (run.state, run.attempt) == (RunState.QUEUED, 1)
    assert not RunAttempt.objects.exists()
