"""/status/jobs/<id>/: a job's next firings, recent runs, lateness, success rate and DAG."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from beat_engine.db_clock import read_database_clock
from jobs.job_figures import job_figures
from jobs.models import Job, JobRun
from jobs.status import charts
from jobs.status.access import Scope, job_or_404, render_page, status_view
from jobs.status.job_data import RECENT_RUNS, next_firings, recent_runs
from jobs.status.svg_charts import Mark


def _dag(job: Job, scope: Scope) -> SafeString:
    """The job's dependency graph, each node linked to its status page; empty without edges."""

    def link(other: Job) -> str:
        return reverse("status:job", args=[other.pk]) + scope.query

    try:
        from jobs.dag_drawing import dag_svg

        markup = dag_svg(job, link=link)
    except ImportError:  # a checkout without the dependency graph's read path
        markup = ""
    # Safe: dag_svg escapes every text it draws.
    return mark_safe(markup)


def _mark(run: JobRun, scope: Scope) -> Mark:
    lateness = f", publish lag {run.lateness.total_seconds():.3f} s" if run.lateness else ""
    label = (
        f"{run.scheduled_for:%Y-%m-%d %H:%M:%S} UTC: {run.state}, "
        f"{run.attempt} attempt{'s' if run.attempt != 1 else ''}{lateness}"
    )
    return Mark(
        x=run.scheduled_for.timestamp(),
        state=run.state,
        attempts=run.attempt,
        label=label,
        href=reverse("status:run", args=[run.pk]) + scope.query,
    )


@status_view
def job_detail(request: HttpRequest, scope: Scope, job_id: uuid.UUID) -> HttpResponse:
    job = job_or_404(scope, job_id)
    now = read_database_clock()
    runs = recent_runs(job, now=now)
    oldest_first = list(reversed(runs))
    publish = [
        (run.scheduled_for, run.lateness.total_seconds())
        for run in oldest_first
        if run.lateness is not None
    ]
    start = [
        (run.scheduled_for, run.start_lag.total_seconds())
        for run in oldest_first
        if run.start_lag is not None
    ]
    context: dict[str, Any] = {
        "job": job,
        "now": now,
        "firings": next_firings(job, now=now),
        "runs": runs,
        # The figures over the same runs: from the oldest one's day on (jobs/job_figures.py).
        "figures": job_figures(
            job_id=job.pk, window=RECENT_RUNS, since=runs[-1].scheduled_for if runs else now
        ),
        "timeline": charts.run_timeline(
            [_mark(run, scope) for run in oldest_first],
            title=f"Last {len(runs)} runs by due time (dot: state; dots above: extra attempts)",
        ),
        "lateness_chart": charts.job_lateness_chart(publish, start),
        "dag": _dag(job, scope),
        "admin_url": reverse("admin:jobs_job_change", args=[job.pk]),
        "admin_runs_url": reverse("admin:jobs_jobrun_changelist") + f"?job__id__exact={job.pk}",
    }
    return render_page(request, scope, "status/job.html", context)
