"""/status/why/?job=<id>&at=<instant>: why a job did not fire (or did, late) at an instant.

The verdict comes from the reasons the system recorded when it decided (jobs/services/explain.py):
paused, missed by the catch-up policy, skipped by the concurrency policy, deferred by the
tenant's limit, engine late, never due, or "it fired: run X", each with its evidence.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.http import HttpRequest, HttpResponse

from beat_engine.db_clock import read_database_clock
from beat_engine.schedules import last_fires
from jobs.errors import InvalidInput
from jobs.models import Job
from jobs.services.explain import explain_firing
from jobs.services.jobs import schedule_spec
from jobs.status.access import Scope, job_or_404, render_page, status_view
from jobs.validation import validate_instant

RECENT_FIRINGS = 6
_RECENT_LOOKBACK = timedelta(days=40)


class WhyForm(forms.Form):
    job = forms.UUIDField(label="Job id", widget=forms.TextInput(attrs={"size": 38}))
    at = forms.CharField(
        label="Instant",
        required=False,
        max_length=64,
        widget=forms.TextInput(attrs={"size": 32, "placeholder": "2026-01-14T09:00"}),
        help_text="ISO 8601, e.g. 2026-01-14T09:00; without an offset, in the job's time zone.",
    )


def parse_instant(text: str, zone: str) -> datetime:
    """An aware instant; a naive one is read in ``zone``. ValueError with a message otherwise."""
    cleaned = text.strip().replace(" ", "T", 1)
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ValueError(f"not an ISO 8601 instant: {text!r}") from None
    if value.utcoffset() is None:
        value = value.replace(tzinfo=ZoneInfo(zone))
    try:
        return validate_instant("at", value)
    except InvalidInput as exc:
        raise ValueError(exc.message) from None


def _recent_firings(job: Job, now: datetime) -> list[datetime]:
    if job.kind not in ("cron", "interval", "once"):
        return []
    spec = schedule_spec(job)
    return list(reversed(last_fires(spec, now - _RECENT_LOOKBACK, now, RECENT_FIRINGS)))


def _bad_request(request: HttpRequest, scope: Scope, context: dict[str, Any]) -> HttpResponse:
    # Bad input is a 400 with the field's error shown in the form, never a 500.
    response = render_page(request, scope, "status/why.html", context)
    response.status_code = 400
    return response


@status_view
def why(request: HttpRequest, scope: Scope) -> HttpResponse:
    form = WhyForm(request.GET or None)
    context: dict[str, Any] = {"form": form}
    if not request.GET:
        return render_page(request, scope, "status/why.html", context)
    if not form.is_valid():
        return _bad_request(request, scope, context)
    job = job_or_404(scope, form.cleaned_data["job"])
    now = read_database_clock()
    context.update(job=job, recent=_recent_firings(job, now), zone=ZoneInfo(job.timezone))
    text = form.cleaned_data["at"]
    if not text:
        return render_page(request, scope, "status/why.html", context)
    try:
        at = parse_instant(text, job.timezone)
    except ValueError as exc:
        form.add_error("at", str(exc))
        return _bad_request(request, scope, context)
    explanation = explain_firing(job, at, now=now)
    context.update(
        at=at,
        explanation=explanation,
        evidence=sorted(explanation.evidence.items()),
    )
    return render_page(request, scope, "status/why.html", context)
