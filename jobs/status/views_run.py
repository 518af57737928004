"""/status/runs/<id>/: one run, every attempt with its worker, timings and error, and its result."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from jobs.models import RunAttempt
from jobs.status.access import Scope, render_page, run_or_404, status_view

RESULT_SHOWN_CHARS = 20_000


@dataclass(frozen=True)
class AttemptRow:
    attempt: RunAttempt
    # queued -> started, started -> finished; None where an instant is missing.
    wait: timedelta | None
    duration: timedelta | None


def _rows(attempts: list[RunAttempt]) -> list[AttemptRow]:
    rows = []
    for a in attempts:
        wait = a.started_at - a.queued_at if a.started_at and a.queued_at else None
        duration = a.finished_at - a.started_at if a.finished_at and a.started_at else None
        rows.append(AttemptRow(attempt=a, wait=wait, duration=duration))
    return rows


def _result_text(result: Any) -> str:
    if result is None:
        return ""
    text = json.dumps(result, indent=2, sort_keys=True, default=str)
    if len(text) > RESULT_SHOWN_CHARS:
        return text[:RESULT_SHOWN_CHARS] + f"\n… ({len(text) - RESULT_SHOWN_CHARS} more characters)"
    return text


@status_view
def run_detail(request: HttpRequest, scope: Scope, run_id: uuid.UUID) -> HttpResponse:
    run = run_or_404(scope, run_id)
    attempts = list(RunAttempt.objects.filter(run=run).order_by("attempt"))
    context: dict[str, Any] = {
        "run": run,
        "job": run.job,
        "attempts": _rows(attempts),
        "result_text": _result_text(run.result),
        "admin_url": reverse("admin:jobs_jobrun_change", args=[run.pk]),
    }
    return render_page(request, scope, "status/run.html", context)
