"""A job page's figures: the next firings and its recent runs, read through run_job_history."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from jobs.models import Job, JobKind, JobRun, JobStatus
from jobs.selectors import job_preview_fires
from jobs.services.jobs import schedule_spec
from jobs.states import RunState

RECENT_RUNS = 100
NEXT_FIRINGS = 10
# Runs that ended and say something about the job's health; skipped, missed and cancelled runs
# never ran their target and are left out of the success rate.
OUTCOME_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)


@dataclass(frozen=True)
class Firing:
    utc: datetime
    local: datetime


@dataclass(frozen=True)
class RecentRuns:
    runs: list[JobRun]
    by_state: dict[str, int]
    succeeded: int
    decided: int
    retried: int

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.decided if self.decided else None


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


def recent_runs(job: Job) -> RecentRuns:
    """The job's newest runs by firing instant (one index range of run_job_history)."""
    runs = list(JobRun.objects.filter(job=job).order_by("-scheduled_for")[:RECENT_RUNS])
    states = Counter(run.state for run in runs)
    return RecentRuns(
        runs=runs,
        by_state={state: states[state] for state in RunState.values if states[state]},
        succeeded=states[RunState.SUCCEEDED],
        decided=sum(states[state] for state in OUTCOME_STATES),
        retried=sum(1 for run in runs if run.attempt > 1),
    )
