"""The run_id_matches_firing CHECK written with built-in functions only (jobs/run_partitions.py).

Same rows accepted as before: the id's first 6 bytes are its firing's millisecond, which is
what ``id BETWEEN jobs_run_id_floor(scheduled_for) AND jobs_run_id_ceil(scheduled_for)`` said.
The old form had PostgreSQL read and inline the two functions' bodies in every statement that
writes a run.

In two steps, so that checking the existing rows blocks no writer: the constraint is replaced
NOT VALID (a catalog change under the table's exclusive lock, a moment, once the statements
running on it end; new and updated rows are checked from then on), then validated, which
scans every partition under a lock that lets claims, starts and outcomes go on. The migration
is not atomic for that: were it stopped between the two, the constraint would be enforced but
not yet validated, and running it again replaces and validates it.
"""

from __future__ import annotations

from django.db import migrations

from jobs.run_partitions import RUN_ID_CHECK_NAME, RUN_ID_CHECK_SQL, RUN_TABLE

# The form 0012 installed, for the way back.
_FIRST_RUN_ID_CHECK_SQL = (
    "id BETWEEN jobs_run_id_floor(scheduled_for) AND jobs_run_id_ceil(scheduled_for)"
)


def _replace(check_sql: str) -> str:
    return (
        f"ALTER TABLE {RUN_TABLE} DROP CONSTRAINT IF EXISTS {RUN_ID_CHECK_NAME}, "
        f"ADD CONSTRAINT {RUN_ID_CHECK_NAME} CHECK ({check_sql}) NOT VALID"
    )


_VALIDATE = f"ALTER TABLE {RUN_TABLE} VALIDATE CONSTRAINT {RUN_ID_CHECK_NAME}"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0015_cheaper_run_writes")]

    operations = [
        migrations.RunSQL(_replace(RUN_ID_CHECK_SQL), _VALIDATE),
        migrations.RunSQL(_VALIDATE, _replace(_FIRST_RUN_ID_CHECK_SQL)),
    ]
