"""A job page's reads: the next firings and its recent runs, read through the firing index."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from jobs.job_figures import FIGURES_WINDOW
from jobs.models import Job, JobKind, JobRun, JobStatus
from jobs.selectors import job_preview_fires, newest_runs
from jobs.services.jobs import schedule_spec

# The same window as the job's figures (jobs/job_figures.py), so the page's charts and its
# success rate describe the same runs.
RECENT_RUNS = FIGURES_WINDOW
NEXT_FIRINGS = 10


@dataclass(frozen=True)
class Firing:
    utc: datetime
    local: datetime


def next_firings(job: Job, *, now: datetime) -> list[Firing]:
    """The next firings after ``now`` by the job's schedule, in its zone and in UTC.

    Shown for paused jobs too (when they would fire if resumed); none for cancelled or
    completed jobs, nor for jobs that fire only after their parents."""
    if job.status in (JobStatus.CANCELLED, JobStatus.COMPLETED):
        return []
    if job.kind not in (JobKind.CRON, JobKind.INTERVAL, JobKind.ONCE):
        return []
    zone = ZoneInfo(job.timezone)
    fires = job_preview_fires(spec=schedule_spec(job), after=now, count=NEXT_FIRINGS)
    return [Firing(utc=at, local=at.astimezone(zone)) for at in fires]


def recent_runs(job: Job, *, now: datetime) -> list[JobRun]:
    """The job's newest runs by firing instant, window by window (jobs/selectors.py)."""
    return newest_runs(JobRun.objects.filter(job=job), count=RECENT_RUNS, now=now)
