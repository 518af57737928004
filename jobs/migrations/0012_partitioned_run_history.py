"""Runs and attempts move to tables partitioned by day of ``scheduled_for`` (docs/history.md,
"Partitions"), keeping every row.

Each run gets a new, time-ordered id (jobs/run_ids.py) and every stored reference to it is
rewritten in the same transaction: attempts, dedup keys, dead letters, ``upstream_run_ids``,
and the run ids inside text (replaced-by notes and errors, stored results' task ids and
arguments, webhook deliveries' event keys and payloads).

Run it with the beat nodes and the workers stopped. Messages already in the broker name the
old ids: a worker given an id that no run has any more finds nothing to start, logs
``execution.delivery.duplicate`` and acks it (jobs/execution.py). Nothing is lost: every run
that was queued keeps its state under its new id, and the outbox sweep republishes queued runs
whose message led to no start (beat_engine/sweep.py). A running attempt's worker loses its
lease the same way (its heartbeat no longer finds the run) and the run retries under its new
id.

Not reversible: the old ids are not kept.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import migrations

import jobs.models
from jobs.run_ids import RUN_ID_FUNCTIONS_SQL
from jobs.run_partitions import (
    ATTEMPT_TABLE,
    RUN_ID_CHECK_NAME,
    RUN_ID_CHECK_SQL,
    RUN_TABLE,
    create_day_partition_sql,
    create_default_partition_sql,
    days_between,
)
from jobs.services.dag_handoff import INSTALL_SQL as HANDOFF_INSTALL_SQL
from jobs.services.dag_handoff import UNINSTALL_SQL as HANDOFF_UNINSTALL_SQL

_UUID_RE = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

# Replaces every old run id found in a text by its new one; other UUIDs (jobs, tenants) are
# not in the map and stay.
_REMAP_FUNCTION_SQL = f"""
CREATE FUNCTION pg_temp.jobs_remap_run_ids(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    hit text;
    replacement uuid;
BEGIN
    IF t IS NULL OR t !~ '{_UUID_RE}' THEN
        RETURN t;
    END IF;
    FOR hit IN SELECT DISTINCT m[1] FROM regexp_matches(t, '({_UUID_RE})', 'g') AS m LOOP
        SELECT new_id INTO replacement FROM jobs_run_id_map WHERE old_id = hit::uuid;
        IF FOUND THEN
            t := replace(t, hit, replacement::text);
        END IF;
    END LOOP;
    RETURN t;
END
$$;
"""


def _columns(cursor, table: str) -> list[str]:
    cursor.execute(
        """
        SELECT attname FROM pg_attribute
         WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
        """,
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _index_definitions(cursor, table: str, skip: set[str]) -> list[tuple[str, str]]:
    cursor.execute(
        """
        SELECT c.relname, pg_get_indexdef(i.indexrelid)
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = %s::regclass AND NOT i.indisprimary
           AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
         ORDER BY c.relname
        """,
        [table],
    )
    return [(name, sql) for name, sql in cursor.fetchall() if name not in skip]


def _rename_indexes(cursor, table: str) -> None:
    cursor.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass",
        [table],
    )
    for (name,) in cursor.fetchall():
        cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{name[:55]}_premig"')


def _exists(cursor, name: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    return bool(cursor.fetchone()[0])


def forwards(apps, schema_editor) -> None:
    ahead = int(settings.SCHEDULER.get("PARTITIONS_AHEAD_DAYS", 7))
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(RUN_ID_FUNCTIONS_SQL)
        cursor.execute(HANDOFF_UNINSTALL_SQL)

        # Old id -> new id, derived from each run's firing.
        cursor.execute(
            f"""
            CREATE TEMP TABLE jobs_run_id_map ON COMMIT DROP AS
            SELECT id AS old_id, jobs_run_id(scheduled_for) AS new_id FROM {RUN_TABLE};
            CREATE UNIQUE INDEX ON jobs_run_id_map (old_id);
            ANALYZE jobs_run_id_map;
            """
        )
        cursor.execute(_REMAP_FUNCTION_SQL)

        run_indexes = _index_definitions(cursor, RUN_TABLE, skip=set())
        attempt_indexes = _index_definitions(cursor, ATTEMPT_TABLE, skip=set())
        run_columns = _columns(cursor, RUN_TABLE)
        attempt_columns = _columns(cursor, ATTEMPT_TABLE)
        cursor.execute(
            f"SELECT DISTINCT (scheduled_for AT TIME ZONE 'UTC')::date FROM {RUN_TABLE}"
        )
        history_days = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT (now() AT TIME ZONE 'UTC')::date")
        today = cursor.fetchone()[0]

        # Set the old tables aside, with their indexes and sequence.
        for table in (RUN_TABLE, ATTEMPT_TABLE):
            _rename_indexes(cursor, table)
            cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_premig")
        if _exists(cursor, "jobs_runattempt_id_seq"):
            cursor.execute("ALTER SEQUENCE jobs_runattempt_id_seq RENAME TO jobs_runattempt_id_seq_premig")

        # The partitioned tables: same columns and CHECKs, keyed for their partitions.
        cursor.execute(
            f"""
            CREATE TABLE {RUN_TABLE} (LIKE {RUN_TABLE}_premig INCLUDING DEFAULTS
                                     INCLUDING CONSTRAINTS INCLUDING STORAGE)
                PARTITION BY RANGE (id);
            ALTER TABLE {RUN_TABLE} ADD CONSTRAINT jobs_jobrun_pkey PRIMARY KEY (id);
            ALTER TABLE {RUN_TABLE} ADD CONSTRAINT {RUN_ID_CHECK_NAME}
                CHECK ({RUN_ID_CHECK_SQL});
            CREATE TABLE {ATTEMPT_TABLE} (LIKE {ATTEMPT_TABLE}_premig INCLUDING DEFAULTS
                                         INCLUDING CONSTRAINTS INCLUDING STORAGE)
                PARTITION BY RANGE (run_id);
            ALTER TABLE {ATTEMPT_TABLE}
                ADD CONSTRAINT jobs_runattempt_pkey PRIMARY KEY (id, run_id),
                ADD CONSTRAINT attempt_unique_per_run UNIQUE (run_id, attempt);
            """
        )
        for table in (RUN_TABLE, ATTEMPT_TABLE):
            for statement in create_default_partition_sql(table):
                cursor.execute(statement)
        days = sorted(history_days | set(days_between(today, today + timedelta(days=ahead))))
        for day in days:
            for table in (RUN_TABLE, ATTEMPT_TABLE):
                for statement in create_day_partition_sql(table, day):
                    cursor.execute(statement)

        # Copy, giving each run its new id and rewriting what refers to runs.
        run_select = []
        for column in run_columns:
            if column == "id":
                run_select.append("m.new_id")
            elif column == "upstream_run_ids":
                run_select.append(
                    "ARRAY(SELECT COALESCE(u.new_id, x.old) FROM unnest(o.upstream_run_ids)"
                    " WITH ORDINALITY AS x(old, n) LEFT JOIN jobs_run_id_map u"
                    " ON u.old_id = x.old ORDER BY x.n)"
                )
            elif column == "last_error":
                run_select.append("pg_temp.jobs_remap_run_ids(o.last_error)")
            else:
                run_select.append(f"o.{column}")
        cursor.execute(
            f"INSERT INTO {RUN_TABLE} ({', '.join(run_columns)}) SELECT {', '.join(run_select)}"
            f" FROM {RUN_TABLE}_premig o JOIN jobs_run_id_map m ON m.old_id = o.id"
        )
        attempt_select = [
            "m.new_id"
            if column == "run_id"
            else "pg_temp.jobs_remap_run_ids(a.error)"
            if column == "error"
            else f"a.{column}"
            for column in attempt_columns
        ]
        cursor.execute(
            f"INSERT INTO {ATTEMPT_TABLE} ({', '.join(attempt_columns)})"
            f" SELECT {', '.join(attempt_select)}"
            f" FROM {ATTEMPT_TABLE}_premig a JOIN jobs_run_id_map m ON m.old_id = a.run_id"
        )
        cursor.execute(
            f"""
            CREATE SEQUENCE jobs_runattempt_id_seq AS bigint OWNED BY {ATTEMPT_TABLE}.id;
            SELECT setval('jobs_runattempt_id_seq', COALESCE(max(id), 0) + 1, false)
              FROM {ATTEMPT_TABLE};
            ALTER TABLE {ATTEMPT_TABLE}
                ALTER COLUMN id SET DEFAULT nextval('jobs_runattempt_id_seq');
            """
        )

        # The tables that point at runs: their FKs go with the old table, their ids are new.
        cursor.execute(
            """
            ALTER TABLE jobs_dedupkey DROP CONSTRAINT jobs_dedupkey_run_id_f733c5cd_fk_jobs_jobrun_id;
            ALTER TABLE jobs_deadletter
                DROP CONSTRAINT jobs_deadletter_run_id_68f6a0b0_fk_jobs_jobrun_id;
            UPDATE jobs_dedupkey d SET run_id = m.new_id
              FROM jobs_run_id_map m WHERE d.run_id = m.old_id;
            UPDATE jobs_deadletter d SET run_id = m.new_id,
                   last_error = pg_temp.jobs_remap_run_ids(d.last_error)
              FROM jobs_run_id_map m WHERE d.run_id = m.old_id;
            UPDATE jobs_notificationdelivery
               SET event_key = pg_temp.jobs_remap_run_ids(event_key),
                   payload = pg_temp.jobs_remap_run_ids(payload::text)::jsonb
             WHERE event_key ~ '[0-9a-f]{8}-' OR payload::text ~ '[0-9a-f]{8}-';
            """
        )
        if _exists(cursor, "django_celery_results_taskresult"):
            cursor.execute(
                """
                UPDATE django_celery_results_taskresult
                   SET task_id = pg_temp.jobs_remap_run_ids(task_id),
                       task_args = pg_temp.jobs_remap_run_ids(task_args),
                       result = pg_temp.jobs_remap_run_ids(result)
                 WHERE task_id ~ '^[0-9a-f]{8}-[0-9a-f-]{27}:'
                """
            )
        cursor.execute(
            f"""
            DROP TABLE {ATTEMPT_TABLE}_premig;
            DROP TABLE {RUN_TABLE}_premig;
            ALTER TABLE {ATTEMPT_TABLE} ADD CONSTRAINT
                jobs_runattempt_run_id_40935a80_fk_jobs_jobrun_id FOREIGN KEY (run_id)
                REFERENCES {RUN_TABLE} (id) DEFERRABLE INITIALLY DEFERRED;
            ALTER TABLE jobs_dedupkey ADD CONSTRAINT
                jobs_dedupkey_run_id_f733c5cd_fk_jobs_jobrun_id FOREIGN KEY (run_id)
                REFERENCES {RUN_TABLE} (id) DEFERRABLE INITIALLY DEFERRED;
            ALTER TABLE jobs_deadletter ADD CONSTRAINT
                jobs_deadletter_run_id_68f6a0b0_fk_jobs_jobrun_id FOREIGN KEY (run_id)
                REFERENCES {RUN_TABLE} (id) DEFERRABLE INITIALLY DEFERRED;
            """
        )

        # The indexes, under their names, now on the partitioned tables (each partition gets
        # its own). The unique firing key is per partition (jobs/run_partitions.py).
        for _name, definition in run_indexes + attempt_indexes:
            cursor.execute(definition.replace("_premig", ""))
        cursor.execute(HANDOFF_INSTALL_SQL)
        cursor.execute(f"ANALYZE {RUN_TABLE}; ANALYZE {ATTEMPT_TABLE};")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0011_history_retention")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards)],
            # Django keeps run_unique_firing (validation knows the key); the database has it
            # per partition.
            state_operations=[
                migrations.AlterField(
                    model_name="jobrun",
                    name="id",
                    field=jobs.models.RunIdField(editable=False, primary_key=True, serialize=False),
                ),
            ],
        ),
    ]
