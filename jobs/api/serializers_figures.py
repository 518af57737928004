"""The figures GET /v1/jobs/{id} shows for a job over its recent runs (jobs/job_figures.py)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.api.fields import AwareDateTimeField
from jobs.job_figures import JobFigures


class JobFiguresOut(serializers.Serializer[Any]):
    window = serializers.IntegerField(help_text="The job's most recent runs looked at, at most.")
    runs = serializers.IntegerField(help_text="Runs in the window.")
    last_run_at = AwareDateTimeField(allow_null=True, help_text="scheduled_for of the latest run")
    next_run_at = AwareDateTimeField(allow_null=True, help_text="The job's next firing")
    last_outcome = serializers.CharField(
        allow_null=True, help_text="State of the most recently finished run"
    )
    last_finished_at = AwareDateTimeField(allow_null=True)
    success_rate = serializers.FloatField(
        allow_null=True, help_text="succeeded / (succeeded + failed + dead); null before any"
    )
    retry_rate = serializers.FloatField(
        allow_null=True, help_text="Runs that needed more than one attempt / runs that started"
    )
    dead_letters = serializers.IntegerField(help_text="Runs in the window that ended dead")
    lateness_p50_sec = serializers.FloatField(allow_null=True, help_text="Publish lag, median")
    lateness_p99_sec = serializers.FloatField(allow_null=True)
    start_lag_p50_sec = serializers.FloatField(allow_null=True, help_text="Start lag, median")
    start_lag_p99_sec = serializers.FloatField(allow_null=True)


def figures_body(figures: JobFigures, *, job: Any, last_run: Any) -> dict[str, Any]:
    return dict(
        JobFiguresOut(
            {
                "window": figures.window,
                "runs": figures.runs,
                "last_run_at": None if last_run is None else last_run.scheduled_for,
                "next_run_at": job.next_fire_at,
                "last_outcome": figures.last_outcome,
                "last_finished_at": figures.last_finished_at,
                "success_rate": figures.success_rate,
                "retry_rate": figures.retry_rate,
                "dead_letters": figures.dead_letters,
                "lateness_p50_sec": figures.lateness_p50,
                "lateness_p99_sec": figures.lateness_p99,
                "start_lag_p50_sec": figures.start_lag_p50,
                "start_lag_p99_sec": figures.start_lag_p99,
            }
        ).data
    )
