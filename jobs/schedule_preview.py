"""What a schedule means to a person: its cron expression in words and its next firings."""

from __future__ import annotations

from datetime import datetime

from cron_descriptor import ExpressionDescriptor, Options  # type: ignore[import-untyped]

try:
    from cron_descriptor import FormatError
except ImportError:  # 1.x, which django-celery-beat pins in the side-by-side benchmark's venv
    from cron_descriptor import (
        FormatException as FormatError,
    )

from beat_engine.cron import ScheduleError, cron_fields, parse_cron
from beat_engine.schedules import parse_timezone, preview_fires
from jobs.models import Job, JobKind
from jobs.services.jobs import schedule_spec

PREVIEW_COUNT = 10


def describe_cron(expression: str) -> str:
    """``expression`` in English ("At 09:00, Monday through Friday"), times on a 24-hour clock.

    Macros such as @daily are expanded by the project's own parser first; cron-descriptor
    does not know them. Both agree on Vixie day matching: a day-of-month and a day-of-week
    that are both restricted read as "or", which is how the evaluator fires them.
    """
    try:
        parse_cron(expression)  # the evaluator's own rules decide what is valid
        fields = cron_fields(expression)
    except ScheduleError as exc:
        return f"not a valid schedule: {exc}"
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(" ".join(fields), options).get_description())
    except (FormatError, ValueError) as exc:
        return f"not a valid schedule: {exc}"


def next_firings(job: Job, *, now: datetime, count: int = PREVIEW_COUNT) -> list[datetime]:
    """The job's next ``count`` firings after ``now``, in the job's own time zone.

    Computed by the engine's evaluator (beat_engine.schedules), so the preview is exactly
    what will fire, daylight-saving transitions included. A paused job shows what it would
    fire once resumed; a dependent job has no schedule of its own and shows none.
    """
    if job.kind not in (JobKind.CRON, JobKind.INTERVAL, JobKind.ONCE):
        return []
    try:
        zone = parse_timezone(job.timezone)
        fires = preview_fires(schedule_spec(job), now, count)
    except ScheduleError:
        return []
    return [fire.astimezone(zone) for fire in fires]
