"""The flush after a transactional test (tests/support/flush.py) leaves every table empty: by
DELETE when the test left few rows, by TRUNCATE when it left many."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection

from jobs.models import JobRun, RunAttempt
from jobs.run_ids import run_id_for
from jobs.services.dedup import dedup_key_for
from jobs.states import RunState
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.flush import DELETE_UP_TO_ROWS, rows_up_to

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _tables() -> list[str]:
    return list(connection.introspection.django_table_names(only_existing=True))


def _tables_with_rows() -> list[str]:
    return [t for t in _tables() if rows_up_to(connection.ops, [t], 0)]


def _seed(runs: int) -> None:
    """Rows in tables that reference each other: tenant, job, runs (in a day partition and in
    the default one), an attempt of the first run, a user."""
    tenant = tenant_factory()
    job = job_factory(tenant)
    at = [T0 + timedelta(seconds=n) for n in range(runs)]
    made = JobRun.objects.bulk_create(
        [
            JobRun(
                id=run_id_for(t), job=job, tenant_id=tenant.id, partition=job.partition,
                scheduled_for=t, state=RunState.PENDING, due_at=t,
                dedup_key=dedup_key_for(job.id, t), created_at=t,
            )
            for t in at
        ],
        batch_size=1000,
    )  # fmt: skip
    RunAttempt.objects.create(run=made[0], attempt=1)
    User.objects.create_user("flushed", password="x")


@pytest.mark.parametrize(
    ("runs", "statement"), [(3, "DELETE"), (DELETE_UP_TO_ROWS + 1, "TRUNCATE")]
)
def test_the_flush_empties_every_table(runs: int, statement: str) -> None:
    _seed(runs)
    assert {"jobs_jobrun", "jobs_runattempt", "jobs_job", "auth_user"} <= set(_tables_with_rows())
    # As TransactionTestCase flushes after each test.
    statements = sql_flush(no_style(), connection, reset_sequences=False, allow_cascade=False)
    assert statements[-1].startswith(statement), statements[-1][:80]

    call_command(
        "flush", verbosity=0, interactive=False, reset_sequences=False, allow_cascade=False,
        inhibit_post_migrate=True,
    )  # fmt: skip

    assert _tables_with_rows() == []
