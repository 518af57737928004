"""Cheaper writes of runs and attempts: the run-id functions inlined, two redundant indexes gone.

* ``jobs_run_id_ms``, ``jobs_run_id_floor`` and ``jobs_run_id_ceil`` get bodies PostgreSQL
  inlines from a stored parse tree (jobs/run_ids.py says why): the run_id_matches_firing CHECK,
  prepared in every statement that inserts or updates a run, no longer parses and plans them
  there. Same results: tests/integration/test_run_partitions.py holds the SQL and the Python
  functions to the same bits.
* ``run_job_history (job, -scheduled_for)`` goes: each run partition's unique firing index on
  ``(job_id, scheduled_for)`` (jobs/run_partitions.py) serves the same reads, scanned
  backwards, and every claim, start and outcome wrote an entry into both.
* The attempts' index on ``run`` alone goes: ``attempt_unique_per_run (run, attempt)`` serves
  every read by run and the cascade from a deleted run. Dropped by name, not by Django's
  AlterField, which would drop and re-create (and re-validate) the foreign key of every
  attempt partition.

A DROP INDEX on a partitioned table cannot be CONCURRENTLY: each takes the table's (and its
partitions') exclusive lock for as long as the drop itself, a moment, after waiting for the
statements running on it; claims and outcomes wait that long.
"""

from __future__ import annotations

from django.db import migrations, models

from jobs.run_ids import RUN_ID_BOUNDS_SQL

# The bodies 0012 installed, for the way back.
_FIRST_RUN_ID_BOUNDS_SQL = """
CREATE OR REPLACE FUNCTION jobs_run_id_ms(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT LEAST(GREATEST(floor(extract(epoch FROM t) * 1000), 0), 281474976710655)::bigint
$$;
CREATE OR REPLACE FUNCTION jobs_run_id_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(jobs_run_id_ms(t)) FROM 3)
                  || '\\x00000000000000000000'::bytea, 'hex')::uuid
$$;
CREATE OR REPLACE FUNCTION jobs_run_id_ceil(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(jobs_run_id_ms(t)) FROM 3)
                  || '\\xffffffffffffffffffff'::bytea, 'hex')::uuid
$$;
"""

# The name Django gave the foreign key's index when it created the table.
_ATTEMPT_RUN_INDEX = "jobs_runattempt_run_id_40935a80"


class Migration(migrations.Migration):
    dependencies = [("jobs", "0014_job_due_keyset")]

    operations = [
        migrations.RunSQL(RUN_ID_BOUNDS_SQL, _FIRST_RUN_ID_BOUNDS_SQL),
        migrations.RemoveIndex(model_name="jobrun", name="run_job_history"),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {_ATTEMPT_RUN_INDEX}",
                    f"CREATE INDEX IF NOT EXISTS {_ATTEMPT_RUN_INDEX} "
                    f"ON jobs_runattempt (run_id)",
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="runattempt",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="attempts",
                        to="jobs.jobrun",
                    ),
                )
            ],
        ),
    ]
