"""The job form's live schedule preview: the schedule being typed, in words and next firings.

Read-only and side-effect free: it evaluates the schedule with the engine's own evaluator
(beat_engine.schedules) and never touches a job, so any staff account that may view jobs may
call it. The saved job is still judged by the job services when the form is submitted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.http import HttpRequest, JsonResponse

from beat_engine.clock import Clock, SystemClock
from beat_engine.schedules import (
    ScheduleError,
    ScheduleKind,
    ScheduleSpec,
    parse_timezone,
    preview_fires,
)
from jobs.schedule_preview import PREVIEW_COUNT, describe_cron

clock: Clock = SystemClock()


def _spec(params: dict[str, str], now: datetime) -> ScheduleSpec | None:
    kind = params.get("kind", "cron")
    zone = params.get("timezone", "UTC").strip() or "UTC"
    if kind == "cron":
        return ScheduleSpec(
            kind=ScheduleKind.CRON, cron=params.get("cron_expression", ""), timezone=zone
        )
    if kind == "interval":
        raw = params.get("interval_seconds", "").strip()
        if not raw.isdigit():
            raise ScheduleError("interval", "enter a whole number of seconds")
        # A new interval job is anchored at its creation; the preview assumes "now".
        return ScheduleSpec(
            kind=ScheduleKind.INTERVAL,
            interval=timedelta(seconds=int(raw)),
            anchor=now,
            timezone=zone,
        )
    if kind == "once":
        raw = params.get("run_at", "").strip()
        try:
            run_at = datetime.fromisoformat(raw)
        except ValueError:
            raise ScheduleError(
                "run_at", "enter a date and time such as 2026-03-01 09:00"
            ) from None
        if run_at.tzinfo is None:
            run_at = run_at.replace(tzinfo=parse_timezone(zone))
        return ScheduleSpec(kind=ScheduleKind.ONCE, run_at=run_at, timezone=zone)
    return None


def schedule_preview_view(request: HttpRequest) -> JsonResponse:
    """GET kind, cron_expression / interval_seconds / run_at, timezone -> words and firings."""
    params = {key: str(value)[:1000] for key, value in request.GET.items()}
    now = clock.now()
    try:
        spec = _spec(params, now)
        if spec is None:
            return JsonResponse({"description": "runs after its parents", "firings": []})
        spec.validate(now=now)
        zone = parse_timezone(spec.timezone)
        fires = [f.astimezone(zone).isoformat() for f in preview_fires(spec, now, PREVIEW_COUNT)]
    except (ScheduleError, OverflowError, ValueError) as exc:
        return JsonResponse({"error": str(exc)})
    description = describe_cron(spec.cron) if spec.kind == ScheduleKind.CRON and spec.cron else ""
    return JsonResponse({"description": description, "timezone": spec.timezone, "firings": fires})
