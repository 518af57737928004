"""Migration 0012 on a database with history: every row is kept under a new, time-ordered id,
every reference follows, and the DAG hand-off still works afterwards (docs/history.md,
"Partitions"). Run on a database of its own, migrated to 0011 by `manage.py migrate`."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from jobs.run_ids import run_id_ceil, run_id_floor

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[2]
DB = "scheduler_migration_0012"


def _params(dbname: str) -> dict[str, str]:
    params = connection.get_connection_params()
    kept = {k: str(v) for k, v in params.items() if k in {"user", "password", "host", "port"}}
    return {**kept, "dbname": dbname}


def _url(dbname: str) -> str:
    p = _params(dbname)
    host = p.get("host", "")
    auth = p.get("user", "") + (":" + p["password"] if p.get("password") else ":")
    if host.startswith("/"):
        return f"postgresql://{auth}@/{dbname}?host={host}"
    return f"postgresql://{auth}@{host}:{p.get('port', '5432')}/{dbname}"


def _manage(*args: str) -> None:
    env = {**os.environ, "DATABASE_URL": _url(DB), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def old_database() -> Iterator[psycopg.Connection]:
    with psycopg.connect(**_params(connection.settings_dict["NAME"]), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
        try:
            _manage("migrate", "django_celery_results", "-v0")
            _manage("migrate", "jobs", "0011", "-v0")
            with psycopg.connect(**_params(DB), autocommit=True) as conn:
                yield conn
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


JOB_SQL = """
INSERT INTO jobs_job (id, tenant_id, name, description, source, kind, cron_expression, timezone,
    target_kind, target_name, target_url, target_headers, payload, queue, priority, status,
    status_reason, partition, max_attempts, retry_base_delay, retry_max_delay, retry_jitter,
    retry_on_client_error, timeout, concurrency_policy, catchup_policy, catchup_limit,
    jitter_window, critical, version, idempotency_key, request_hash, created_at, updated_at,
    next_fire_at)
VALUES (%(id)s, %(tenant)s, %(name)s, '', 'api', %(kind)s, %(cron)s, 'UTC', 'callable', 'x', '',
    '{}', '{}', 'scheduler', 5, 'active', '', 0, 3, '10s', '10m', true, false, '5m', 'allow',
    'skip', 10, '0', false, 1, '', '', now(), now(), %(next)s)
"""

RUN_SQL = """
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state, attempt,
    epoch, dedup_key, worker, cancel_requested, last_error, replayed_count, created_at,
    finished_at, queued_at, due_at, upstream_run_ids)
VALUES (%(id)s, %(job)s, %(tenant)s, 0, %(t)s, 'schedule', %(state)s::text, 1, 0,
    md5(%(id)s::text), '',
    false, %(error)s, 0, now(), CASE WHEN %(state)s::text = 'queued' THEN NULL ELSE now() END,
    now(), now(), %(ups)s::uuid[])
"""


def _seed(conn: psycopg.Connection) -> tuple[dict[str, uuid.UUID], int]:
    tenant = conn.execute(
        "INSERT INTO jobs_tenant (name, is_active, created_at, max_queued_runs)"
        " VALUES ('t', true, now(), 100) RETURNING id"
    ).fetchone()[0]
    parent, child = uuid.uuid4(), uuid.uuid4()
    conn.execute(JOB_SQL, {"id": parent, "tenant": tenant, "name": "parent", "kind": "cron",
                           "cron": "0 * * * *", "next": "2026-11-20"})  # fmt: skip
    conn.execute(JOB_SQL, {"id": child, "tenant": tenant, "name": "child", "kind": "dependent",
                           "cron": "", "next": None})  # fmt: skip
    conn.execute(
        "INSERT INTO jobs_jobdependency (tenant_id, parent_id, child_id, created_at)"
        " VALUES (%s, %s, %s, now())",
        [tenant, parent, child],
    )
    ids: dict[str, uuid.UUID] = {}

    def run(key: str, job: uuid.UUID, t: str, state: str, error: str = "", ups=()) -> uuid.UUID:
        ids[key] = uuid.uuid4()
        conn.execute(RUN_SQL, {"id": ids[key], "job": job, "tenant": tenant, "t": t,
                               "state": state, "error": error, "ups": list(ups)})  # fmt: skip
        return ids[key]

    # The child's run for a T, written before its parent's (the hand-off leaves it), names the
    # parent's run; every other parent success hands off a pending child run naming its own.
    ids["h27"] = uuid.uuid4()
    run("child", child, "2026-11-21T03:00Z", "succeeded", ups=[ids["h27"]])
    # Three days of history, a queued run, a run far ahead.
    for n in range(24 * 3):
        at = f"2026-11-{20 + n // 24:02d}T{n % 24:02d}:00Z"
        if n == 27:
            conn.execute(RUN_SQL, {"id": ids["h27"], "job": parent, "tenant": tenant, "t": at,
                                   "state": "succeeded", "error": "", "ups": []})  # fmt: skip
        else:
            run(f"h{n}", parent, at, "succeeded")
    run("queued", parent, "2026-11-23T05:00Z", "queued")
    run("far", parent, "2999-01-01T00:00Z", "failed")
    run("noted", parent, "2026-11-21T03:30Z", "cancelled",
        error=f"replaced by the newer run {ids['h27']} (replace)")  # fmt: skip
    for key in ("h5", "h27", "far"):
        conn.execute(
            "INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, outcome, error)"
            " VALUES (%s, 1, 0, 'w', 'failed', %s)",
            [ids[key], f"attempt of {ids[key]}"],
        )
    conn.execute(
        "INSERT INTO jobs_dedupkey (key, tenant_id, job_id, run_id, outcome, created_at,"
        " expires_at) VALUES ('k', %s, %s, %s, 'succeeded', now(), now() + interval '1 day')",
        [tenant, parent, ids["h5"]],
    )
    conn.execute(
        "INSERT INTO jobs_deadletter (run_id, job_id, tenant_id, attempts, last_error, moved_at,"
        " replay_count) VALUES (%s, %s, %s, 1, 'x', now(), 0)",
        [ids["far"], parent, tenant],
    )
    conn.execute(
        "INSERT INTO django_celery_results_taskresult (task_id, status, task_args, result,"
        " date_done, date_created, task_name, content_type, content_encoding)"
        " VALUES (%s, 'SUCCESS', %s, %s, now(), now(), 't', 'application/json', 'utf-8')",
        [f"{ids['h5']}:1", f'["{ids["h5"]}", 1]', f'{{"run_id": "{ids["h5"]}"}}'],
    )
    webhook = conn.execute(
        "INSERT INTO jobs_notificationwebhook (id, tenant_id, name, url, events, enabled,"
        " secret_version, created_at, updated_at) VALUES (gen_random_uuid(), %s, 'w',"
        " 'https://example.com', '{dead_letter}', true, 1, now(), now()) RETURNING id",
        [tenant],
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO jobs_notificationdelivery (id, webhook_id, tenant_id, event, event_key,"
        " payload, state, attempts, next_attempt_at, last_error, created_at) VALUES"
        " (gen_random_uuid(), %s, %s, 'dead_letter', %s, %s, 'pending', 0, now(), '', now())",
        [webhook, tenant, f"dead_letter:{ids['far']}:0", f'{{"run_id": "{ids["far"]}"}}'],
    )
    ids["parent"], ids["child_job"] = parent, child
    return ids, tenant


def _one(conn: psycopg.Connection, sql: str, *params: object) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None, sql
    return row[0]


def test_the_migration_keeps_every_row_and_reference(old_database: psycopg.Connection) -> None:
    conn = old_database
    old, tenant = _seed(conn)
    runs_before = _one(conn, "SELECT count(*) FROM jobs_jobrun")

    _manage("migrate", "-v0")

    assert _one(conn, "SELECT count(*) FROM jobs_jobrun") == runs_before
    assert _one(conn, "SELECT count(*) FROM jobs_runattempt") == 3
    assert _one(conn, "SELECT relkind FROM pg_class WHERE relname = 'jobs_jobrun'") == "p"
    # Every run has an id of its firing, in its day's partition: each day that has runs got one.
    for run_id, t, where in conn.execute(
        "SELECT id, scheduled_for, tableoid::regclass::text FROM jobs_jobrun"
    ).fetchall():
        assert run_id_floor(t) <= run_id <= run_id_ceil(t)
        assert where == f"jobs_jobrun_p{t:%Y%m%d}"
    assert not conn.execute(
        "SELECT 1 FROM jobs_jobrun WHERE id = ANY(%s)", [list(old.values())]
    ).fetchall()

    def new_id(t: str) -> uuid.UUID:
        return _one(  # type: ignore[return-value]
            conn, "SELECT id FROM jobs_jobrun WHERE job_id = %s AND scheduled_for = %s",
            old["parent"], t,
        )  # fmt: skip

    h5, h27, far = new_id("2026-11-20T05:00Z"), new_id("2026-11-21T03:00Z"), new_id("2999-01-01")
    attempts = dict(conn.execute("SELECT run_id, error FROM jobs_runattempt").fetchall())
    assert attempts == {r: f"attempt of {r}" for r in (h5, h27, far)}
    assert _one(conn, "SELECT run_id FROM jobs_dedupkey") == h5
    assert _one(conn, "SELECT run_id FROM jobs_deadletter") == far
    assert _one(
        conn, "SELECT upstream_run_ids FROM jobs_jobrun WHERE job_id = %s"
        " AND scheduled_for = '2026-11-21T03:00Z'", old["child_job"],
    ) == [h27]  # fmt: skip
    # Every run the children's runs name is a run (the hand-off wrote most of them).
    assert _one(
        conn, "SELECT count(*) FROM jobs_jobrun c, unnest(c.upstream_run_ids) AS u(id)"
        " WHERE NOT EXISTS (SELECT 1 FROM jobs_jobrun p WHERE p.id = u.id)",
    ) == 0  # fmt: skip
    assert _one(
        conn, "SELECT count(*) FROM jobs_jobrun WHERE cardinality(upstream_run_ids) > 0"
    ) >= 70  # fmt: skip
    assert _one(
        conn, "SELECT last_error FROM jobs_jobrun WHERE scheduled_for = '2026-11-21T03:30Z'"
    ) == f"replaced by the newer run {h27} (replace)"  # fmt: skip
    assert conn.execute(
        "SELECT task_id, task_args, result FROM django_celery_results_taskresult"
    ).fetchone() == (f"{h5}:1", f'["{h5}", 1]', f'{{"run_id": "{h5}"}}')
    assert conn.execute(
        "SELECT event_key, payload->>'run_id' FROM jobs_notificationdelivery"
    ).fetchone() == (f"dead_letter:{far}:0", str(far))

    # New attempts number on from the old ones; the unique firing key still holds.
    assert _one(
        conn, "INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, outcome, error)"
        " VALUES (%s, 2, 0, 'w', '', '') RETURNING id", h5,
    ) > _one(conn, "SELECT max(id) FROM jobs_runattempt WHERE attempt = 1")  # fmt: skip
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            RUN_SQL.replace("%(id)s,", "jobs_run_id(%(t)s),", 1),
            {"id": uuid.uuid4(), "job": old["parent"], "tenant": tenant, "t": "2026-11-20T05:00Z",
             "state": "succeeded", "error": "", "ups": []},
        )  # fmt: skip

    # The hand-off trigger: a parent's success at a new T writes the child's run for T.
    conn.execute(
        RUN_SQL.replace("%(id)s,", "jobs_run_id(%(t)s),", 1),
        {"id": uuid.uuid4(), "job": old["parent"], "tenant": tenant, "t": "2026-11-22T09:30Z",
         "state": "succeeded", "error": "", "ups": []},
    )  # fmt: skip
    child_run = conn.execute(
        "SELECT state, upstream_run_ids, id FROM jobs_jobrun"
        " WHERE job_id = %s AND scheduled_for = '2026-11-22T09:30Z'",
        [old["child_job"]],
    ).fetchone()
    assert child_run is not None
    assert child_run[0] == "pending"
    assert child_run[1] == [new_id("2026-11-22T09:30Z")]
    _manage("check", "--database", "default")

    # 0016 and back: the CHECK of run ids changes form, validated on every partition each way,
    # and refuses a run whose id is another instant's in either form.
    def check_forms() -> set[tuple[str, bool]]:
        return set(conn.execute(
            "SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint"
            " WHERE conname = 'run_id_matches_firing'"
        ).fetchall())  # fmt: skip

    stray = {"id": run_id_floor(datetime(2026, 11, 23, tzinfo=UTC)), "job": old["parent"],
             "tenant": tenant, "t": "2026-11-22T10:00Z", "state": "succeeded", "error": "",
             "ups": []}  # fmt: skip

    def the_one_form() -> tuple[str, bool]:
        forms = check_forms()
        assert len(forms) == 1, forms  # the same on the parent and every partition
        return forms.pop()

    assert "uuid_send(id)" in the_one_form()[0]
    _manage("migrate", "jobs", "0015", "-v0")
    assert the_one_form() == (
        "CHECK (((id >= jobs_run_id_floor(scheduled_for)) AND "
        "(id <= jobs_run_id_ceil(scheduled_for))))",
        True,
    )
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(RUN_SQL, stray)
    _manage("migrate", "-v0")
    definition, validated = the_one_form()
    assert "uuid_send(id)" in definition
    assert "jobs_run_id" not in definition
    assert validated
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(RUN_SQL, stray)
    assert _one(conn, "SELECT count(*) FROM jobs_jobrun") == runs_before + 2
