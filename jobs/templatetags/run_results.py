"""{% stored_results run %}: a run's attempt results as stored in django-celery-results."""

from __future__ import annotations

import json
from typing import Any

from django import template

from jobs.models import JobRun
from jobs.services.run_results import result_decoded, result_task_id, results_of_run

register = template.Library()

SHOWN_CHARS = 8_000


def _shown(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > SHOWN_CHARS:
        return text[:SHOWN_CHARS] + f"\n… ({len(text) - SHOWN_CHARS} more characters)"
    return text


@register.inclusion_tag("status/_stored_results.html")
def stored_results(run: JobRun) -> dict[str, Any]:
    rows = results_of_run(run)
    return {
        "run": run,
        "results": [
            {
                "attempt": number,
                "task_id": result_task_id(run.id, number),
                "row": rows.get(number),
                "value": _shown(result_decoded(rows[number])) if number in rows else "",
            }
            for number in range(1, run.attempt + 1)
        ],
        "stored": len(rows),
    }
