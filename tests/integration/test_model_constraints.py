"""The database itself refuses duplicate firings and inconsistent rows, even under races."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from jobs.models import Job, JobRun
from jobs.services.dedup import dedup_key_for
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory

pytestmark = pytest.mark.django_db(transaction=True)


def _conninfo() -> str:
    params = connection.get_connection_params()
    return psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in {"dbname", "user", "password", "host", "port"}}
    )


def test_two_concurrent_inserters_create_one_run_per_firing() -> None:
    job = job_factory()
    scheduled_for = T0 + timedelta(minutes=5)
    barrier = threading.Barrier(2)
    results: list[str] = []
    insert = """
        INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
            due_at, attempt, epoch, dedup_key, worker, cancel_requested, last_error,
            replayed_count, created_at, queued_at)
        VALUES (jobs_run_id(%s), %s, %s, %s, %s, 'schedule', 'queued', %s, 1, %s, %s, '',
            false, '', 0, %s, %s)
        ON CONFLICT DO NOTHING
        RETURNING id
    """

    def inserter(epoch: int) -> None:
        with psycopg.connect(_conninfo()) as conn:
            barrier.wait()
            row = conn.execute(
                insert,
                [
                    scheduled_for,
                    job.id,
                    job.tenant_id,
                    job.partition,
                    scheduled_for,
                    scheduled_for,
                    epoch,
                    dedup_key_for(job.id, scheduled_for),
                    T0,
                    T0,
                ],
            ).fetchone()
            conn.commit()
            results.append("inserted" if row else "conflict")

    threads = [threading.Thread(target=inserter, args=(epoch,)) for epoch in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["conflict", "inserted"]
    assert JobRun.objects.filter(job=job, scheduled_for=scheduled_for).count() == 1


def test_plain_duplicate_insert_is_refused() -> None:
    job = job_factory()
    run_factory(job, scheduled_for=T0)
    # The key is a unique index of the firing's partition (docs/history.md, "Partitions").
    with pytest.raises(IntegrityError, match="_firing"), transaction.atomic():
        run_factory(job, scheduled_for=T0)


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"state": RunState.RETRY_WAIT, "due_at": None}, "run_timer_states_have_due_at"),
        ({"state": RunState.RUNNING, "attempt": 1}, "run_running_has_lease"),
        ({"state": RunState.QUEUED, "attempt": 0}, "run_queued_has_attempt"),
        ({"state": RunState.SUCCEEDED, "attempt": 1}, "run_finished_has_time"),
        ({"state": "exploded"}, "run_state_valid"),
    ],
)
def test_run_check_constraints(fields: dict[str, object], constraint: str) -> None:
    job = job_factory()
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        run_factory(job, scheduled_for=T0, **fields)


@pytest.mark.parametrize(
    ("update", "constraint"),
    [
        ({"kind": "cron", "cron_expression": ""}, "job_schedule_fields_match_kind"),
        ({"target_kind": "http", "target_url": ""}, "job_target_fields_match_kind"),
        ({"next_fire_at": None}, "job_active_has_next_fire"),
        ({"max_attempts": 0}, "job_max_attempts_range"),
        ({"retry_max_delay": timedelta(seconds=1)}, "job_retry_delays_ordered"),
        ({"timeout": timedelta(0)}, "job_timeout_positive"),
        ({"priority": 12}, "job_priority_range"),
        ({"status": "sleeping"}, "job_status_valid"),
    ],
)
def test_job_check_constraints(update: dict[str, object], constraint: str) -> None:
    job = job_factory()
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(**update)


def test_two_concurrent_creators_of_one_job_name_leave_one_job() -> None:
    job = job_factory()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    sql = """
        INSERT INTO jobs_job (id, tenant_id, name, description, source, kind, cron_expression,
            timezone, target_kind, target_name, target_url, target_headers, payload, queue,
            priority, status, status_reason, next_fire_at, partition, max_attempts,
            retry_base_delay, retry_max_delay, retry_jitter, retry_on_client_error, timeout,
            concurrency_policy, catchup_policy, catchup_limit, jitter_window, critical, version,
            idempotency_key, request_hash, created_at, updated_at)
        VALUES (gen_random_uuid(), %s, 'same-name', '', 'api', 'cron', '* * * * *', 'UTC',
            'callable', 'demo.heartbeat', '', '{}', '{}', 'scheduler', 5, 'active', '', %s, 0, 3,
            '10 seconds', '60 seconds', true, false, '60 seconds', 'allow', 'skip', 100,
            '0 seconds', false, 1, '', '', %s, %s)
    """

    def creator() -> None:
        with psycopg.connect(_conninfo()) as conn:
            barrier.wait()
            try:
                conn.execute(sql, [job.tenant_id, T0, T0, T0])
                conn.commit()
                outcomes.append("created")
            except psycopg.errors.UniqueViolation:
                outcomes.append("refused")

    threads = [threading.Thread(target=creator) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created", "refused"]
    assert Job.objects.filter(tenant_id=job.tenant_id, name="same-name").count() == 1


def test_due_index_is_partial_on_active_jobs() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_due_keyset'")
        (definition,) = cursor.fetchone()
    assert "(partition, next_fire_at, id)" in definition
    assert "WHERE ((status)::text = 'active'::text)" in definition
