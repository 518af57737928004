"""Read paths for the API: every query starts from the tenant, so another tenant's ids are 404."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet

from beat_engine.schedules import ScheduleSpec, preview_fires
from jobs.archive_format import day_bounds, iso
from jobs.job_figures import FIGURES_WINDOW, JobFigures, job_figures
from jobs.models import ArchivedDay, DeadLetter, Job, JobRun, Tenant
from jobs.run_ids import run_id_ceil, run_id_day, run_id_floor
from jobs.run_windows import Window
from jobs.run_windows import windows as run_windows_of

# The DAG reads live in their own module; re-exported so callers find every read path here.
from jobs.selectors_graph import GRAPH_MAX_JOBS as GRAPH_MAX_JOBS
from jobs.selectors_graph import JobGraph as JobGraph
from jobs.selectors_graph import job_graph as job_graph

PREVIEW_MAX = 100


@dataclass(frozen=True)
class JobSummary:
    """What GET /v1/jobs/{id} adds to the definition: the latest run, and counts by state and
    figures over the job's recent runs (jobs/job_figures.py)."""

    job: Job
    last_run: JobRun | None
    run_counts: dict[str, int]
    figures: JobFigures | None = None


def job_list(
    *, tenant: Tenant, status: str | None = None, name: str | None = None
) -> QuerySet[Job]:
    # Each job's parents (depends_on) come with the page in one more query, not one per job.
    jobs = Job.objects.filter(tenant=tenant).prefetch_related("parent_edges")
    if status:
        jobs = jobs.filter(status=status)
    if name:
        jobs = jobs.filter(name=name)
    return jobs


def job_get(*, tenant: Tenant, job_id: uuid.UUID) -> Job:
    """Raises Job.DoesNotExist for an unknown id and for another tenant's job alike."""
    return Job.objects.get(tenant=tenant, id=job_id)


def newest_runs(runs: QuerySet[Any], *, count: int, now: datetime) -> list[Any]:
    """The first ``count`` rows of ``runs`` (one job's), newest firing first, read window by
    window (jobs/run_windows.py): the cost grows neither with the job's history nor with the
    number of partitions."""
    found: list[Any] = []
    for window in run_windows(since=None, until=None, now=now)(None, False):
        found += runs.filter(window).order_by("-scheduled_for")[: count - len(found)]
        if len(found) == count:
            break
    return found


def job_summary(*, job: Job, now: datetime) -> JobSummary:
    newest = newest_runs(
        JobRun.objects.filter(job=job).values_list("id", "scheduled_for"),
        count=FIGURES_WINDOW,
        now=now,
    )
    last_run = JobRun.objects.filter(id=newest[0][0]).first() if newest else None
    # No run at all: the figures read from now on, where there are none, not every partition.
    figures = job_figures(job_id=job.id, since=newest[-1][1] if newest else now)
    return JobSummary(job=job, last_run=last_run, run_counts=figures.run_counts, figures=figures)


def run_list(
    *,
    tenant: Tenant,
    job_id: uuid.UUID,
    state: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    columns: Sequence[str],
) -> QuerySet[Any]:
    """A job's runs, for keyset pages on scheduled_for, as mappings of ``columns``.

    A job that is not the tenant's reads as no runs, like one that never ran: a caller that
    must tell the two apart asks job_get when the page is empty, which spares every other page
    the job's lookup.
    """
    runs: QuerySet[Any] = JobRun.objects.filter(tenant=tenant, job_id=job_id).values(*columns)
    if state:
        runs = runs.filter(state=state)
    if since is not None:
        runs = runs.filter(scheduled_for__gte=since)
    if until is not None:
        runs = runs.filter(scheduled_for__lt=until)
    return runs


def run_windows(
    *, since: datetime | None, until: datetime | None, now: datetime
) -> Callable[[datetime | None, bool], list[Q]]:
    """The windows a page of run_list is read in (jobs/run_windows.py), as filters that bound
    the run id as well as scheduled_for, so that each query plans only its days' partitions.

    ``position`` is the cursor's scheduled_for, a strict bound the cursor's own filter holds.
    """

    def for_page(position: datetime | None, backwards: bool) -> list[Q]:
        low, high = since, until
        if position is not None and backwards:
            low = position if low is None else max(low, position)
        elif position is not None:
            high = position if high is None else min(high, position)
        return [
            _window_filter(window)
            for window in run_windows_of(since=low, until=high, now=now, ascending=backwards)
        ]

    return for_page


def _window_filter(window: Window) -> Q:
    # A run at instant t has an id from run_id_floor(t) to run_id_ceil(t): the id bounds hold
    # every run the scheduled_for bounds hold, and name the partitions to plan.
    found = Q()
    if window.since is not None:
        found &= Q(scheduled_for__gte=window.since, id__gte=run_id_floor(window.since))
    if window.until is not None:
        found &= Q(scheduled_for__lt=window.until, id__lte=run_id_ceil(window.until))
    return found


def run_get(*, tenant: Tenant, run_id: uuid.UUID) -> JobRun:
    return (
        JobRun.objects.filter(tenant=tenant)
        .select_related("job")
        .prefetch_related("attempts")
        .get(id=run_id)
    )


@dataclass(frozen=True)
class ArchivedSpan:
    """The archived UTC days of a range of scheduled_for: their runs are in the archive, not
    in the runs table (docs/history.md, "Archive")."""

    first_day: date
    last_day: date
    days: int

    def covers(self, first: date, last: date) -> bool:
        """Every day from first to last (inclusive) is archived."""
        return (
            self.first_day <= first
            and self.last_day >= last
            and self.days == (last - first).days + 1
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "from": iso(day_bounds(self.first_day)[0]),
            "until": iso(day_bounds(self.last_day)[1]),
            "days": self.days,
            "message": (
                f"runs scheduled on {self.days} UTC day(s) from {self.first_day.isoformat()} "
                f"to {self.last_day.isoformat()} are archived: the API serves the hot window "
                "only; an operator loads a day back with manage.py restore_runs"
            ),
        }


def _last_day(until: datetime) -> date:
    """The UTC day of the last instant before ``until`` (exclusive)."""
    return (until - timedelta(microseconds=1)).astimezone(UTC).date()


def archived_span(*, since: datetime | None, until: datetime | None) -> ArchivedSpan | None:
    """The archived days within [since, until), or None. ArchivedDay holds a row per archived
    day, a few hundred a year: the aggregate reads that small table, never the runs."""
    days = ArchivedDay.objects.all()
    if since is not None:
        days = days.filter(day__gte=since.astimezone(UTC).date())
    if until is not None:
        days = days.filter(day__lte=_last_day(until))
    found = days.aggregate(first=Min("day"), last=Max("day"), n=Count("day"))
    if not found["n"]:
        return None
    return ArchivedSpan(first_day=found["first"], last_day=found["last"], days=found["n"])


def range_archived(span: ArchivedSpan, *, since: datetime | None, until: datetime | None) -> bool:
    """The whole range [since, until) lies in archived days (an open end never does: today is
    hot; an open start begins at the first archived day)."""
    if until is None:
        return False
    first = since.astimezone(UTC).date() if since is not None else span.first_day
    return span.covers(first, _last_day(until))


def run_archived_day(run_id: uuid.UUID) -> ArchivedSpan | None:
    """The archived day a run id names, or None: a run id carries its scheduled_for
    (jobs/run_ids.py), so the id alone says the day."""
    if run_id.version != 7:
        return None
    day = run_id_day(run_id)
    if not ArchivedDay.objects.filter(day=day).exists():
        return None
    return ArchivedSpan(first_day=day, last_day=day, days=1)


def dead_letter_list(
    *, tenant: Tenant, job_id: uuid.UUID | None = None, replayed: bool | None = None
) -> QuerySet[DeadLetter]:
    letters = DeadLetter.objects.filter(tenant=tenant)
    if job_id is not None:
        letters = letters.filter(job_id=job_id)
    if replayed is not None:
        letters = letters.filter(replayed_at__isnull=not replayed)
    return letters


def dead_letter_get(*, tenant: Tenant, dead_letter_id: int) -> DeadLetter:
    return DeadLetter.objects.filter(tenant=tenant).select_related("run").get(id=dead_letter_id)


def job_preview_fires(*, spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` firings strictly after ``after``; the spec must already be valid."""
    return preview_fires(spec, after, min(count, PREVIEW_MAX))
