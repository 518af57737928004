"""GET /v1/jobs/{id}: figures over the job's recent runs, bounded to the last 100 firings."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.job_figures import FIGURES_WINDOW
from jobs.models import Job
from jobs.states import RunState
from tests.support.api import ApiClient, job_body
from tests.support.factories import T0, run_factory

pytestmark = pytest.mark.django_db


def _finished(job: Job, i: int, state: RunState, **fields: object) -> None:
    at = T0 + timedelta(minutes=i)
    run_factory(
        job,
        scheduled_for=at,
        state=state,
        attempt=fields.pop("attempt", 1),
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=2),
        due_at=at,
        **fields,
    )


def test_figures_over_recent_runs(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]
    job = Job.objects.get(id=job_id)
    # Oldest first: 6 succeeded (one after a retry), 2 failed, 1 dead, 1 cancelled, then one
    # still waiting.
    for i in range(6):
        _finished(
            job,
            i,
            RunState.SUCCEEDED,
            attempt=2 if i == 0 else 1,
            lateness=timedelta(milliseconds=10 * (i + 1)),
            start_lag=timedelta(milliseconds=100 * (i + 1)),
        )
    _finished(job, 6, RunState.FAILED)
    _finished(job, 7, RunState.FAILED)
    _finished(job, 8, RunState.DEAD, attempt=3)
    _finished(job, 9, RunState.CANCELLED)
    run_factory(job, scheduled_for=T0 + timedelta(minutes=10))

    body = alice.get(f"/v1/jobs/{job_id}").json()

    assert body["run_counts"] == {
        "succeeded": 6, "failed": 2, "dead": 1, "cancelled": 1, "pending": 1,
    }  # fmt: skip
    figures = body["figures"]
    assert figures["window"] == FIGURES_WINDOW
    assert figures["runs"] == 11
    assert figures["last_run_at"] == "2026-01-01T00:10:00Z"
    assert figures["next_run_at"] == body["next_fire_at"]
    assert figures["last_outcome"] == "cancelled"
    assert figures["last_finished_at"] == "2026-01-01T00:09:02Z"
    # 6 of the 9 runs whose target ran to an outcome; the cancelled one is not counted.
    assert figures["success_rate"] == pytest.approx(6 / 9)
    # Two of the ten that started needed more than one attempt.
    assert figures["retry_rate"] == pytest.approx(2 / 10)
    assert figures["dead_letters"] == 1
    assert figures["lateness_p50_sec"] == pytest.approx(0.035)
    assert figures["lateness_p99_sec"] == pytest.approx(0.0595)
    assert figures["start_lag_p50_sec"] == pytest.approx(0.35)
    assert figures["start_lag_p99_sec"] == pytest.approx(0.595)


def test_figures_and_counts_look_only_at_the_last_hundred_runs(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]
    job = Job.objects.get(id=job_id)
    for i in range(5):
        _finished(job, i, RunState.FAILED)
    for i in range(5, 5 + FIGURES_WINDOW):
        _finished(job, i, RunState.SUCCEEDED)

    with CaptureQueriesContext(connection) as queries:
        body = alice.get(f"/v1/jobs/{job_id}").json()

    assert body["run_counts"] == {"succeeded": FIGURES_WINDOW}
    assert body["figures"]["runs"] == FIGURES_WINDOW
    assert body["figures"]["success_rate"] == 1.0
    run_reads = [q["sql"] for q in queries.captured_queries if "jobs_jobrun" in q["sql"]]
    # The newest hundred firings (one window holds them all), the latest run by its id, and one
    # statement for every figure; no GROUP BY over all runs.
    assert len(run_reads) == 3, run_reads
    assert all("LIMIT" in sql for sql in run_reads)


def test_a_job_without_runs_has_empty_figures(alice: ApiClient) -> None:
    job_id = alice.post("/v1/jobs", job_body()).json()["job_id"]

    figures = alice.get(f"/v1/jobs/{job_id}").json()["figures"]

    assert figures["runs"] == 0
    assert figures["last_run_at"] is None
    assert figures["last_outcome"] is None
    assert figures["success_rate"] is None
    assert figures["retry_rate"] is None
    assert figures["dead_letters"] == 0
    assert figures["lateness_p99_sec"] is None
