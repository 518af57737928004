"""A job's figures over its recent runs, for GET /v1/jobs/{id} and the status pages.

Per-job figures live here, not in metric labels (a job id label would be unbounded). They are
computed over a bounded window, the job's last FIGURES_WINDOW runs by scheduled_for, read from
the unique firing index (job, scheduled_for) of each run partition, backwards, in one
statement: a minutely job has 500,000
runs a year, and counting all of them on every GET grew with its age.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from jobs.run_ids import run_id_floor
from jobs.states import RunState

FIGURES_WINDOW = 100

# Runs whose target ran to an outcome: the base of the success rate. Cancelled, skipped, missed
# and upstream-failed runs say nothing about the target.
_OUTCOME_STATES = sorted(s.value for s in (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD))
_ENDED_STATES = sorted(
    s.value
    for s in (
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.DEAD,
        RunState.CANCELLED,
        RunState.SKIPPED,
        RunState.MISSED,
        RunState.UPSTREAM_FAILED,
    )
)

_FIGURES_SQL = """
WITH recent AS (
    SELECT state, attempt, lateness, start_lag, started_at, finished_at
      FROM jobs_jobrun
     WHERE job_id = %(job_id)s{since}
     ORDER BY scheduled_for DESC
     LIMIT %(window)s
), by_state AS (
    SELECT state, count(*) AS n FROM recent GROUP BY state
)
SELECT count(*),
       count(*) FILTER (WHERE state = %(succeeded)s),
       count(*) FILTER (WHERE state = ANY(%(outcomes)s)),
       count(*) FILTER (WHERE started_at IS NOT NULL OR state = ANY(%(outcomes)s)),
       count(*) FILTER (WHERE attempt > 1),
       count(*) FILTER (WHERE state = %(dead)s),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM start_lag)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM start_lag)),
       (array_agg(state ORDER BY finished_at DESC)
            FILTER (WHERE state = ANY(%(ended)s) AND finished_at IS NOT NULL))[1],
       max(finished_at) FILTER (WHERE state = ANY(%(ended)s)),
       (SELECT json_object_agg(state, n) FROM by_state)
  FROM recent
"""


@dataclass(frozen=True)
class JobFigures:
    window: int
    runs: int
    run_counts: dict[str, int]
    # The most recently finished run's state, and when it finished.
    last_outcome: str | None
    last_finished_at: datetime | None
    # Succeeded / ran to an outcome (succeeded, failed, dead); None before any outcome.
    success_rate: float | None
    # Runs that needed more than one attempt / runs that started; None before any start.
    retry_rate: float | None
    dead_letters: int
    # Seconds; None while no run in the window has the figure.
    lateness_p50: float | None
    lateness_p99: float | None
    start_lag_p50: float | None
    start_lag_p99: float | None


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


# The bound on the id as well names the partitions to plan (jobs/run_windows.py).
_SINCE_SQL = " AND scheduled_for >= %(since)s AND id >= %(since_id)s"


def job_figures(
    *, job_id: uuid.UUID, window: int = FIGURES_WINDOW, since: datetime | None = None
) -> JobFigures:
    """The job's figures over its last ``window`` runs (by scheduled_for), in one statement.

    ``since``, when the caller knows that the last ``window`` runs all fire at or after it,
    keeps the statement to the partitions from that day on."""
    with connection.cursor() as cursor:
        cursor.execute(
            _FIGURES_SQL.format(since="" if since is None else _SINCE_SQL),
            {
                "since": since,
                "since_id": None if since is None else run_id_floor(since),
                "job_id": job_id,
                "window": window,
                "succeeded": RunState.SUCCEEDED.value,
                "dead": RunState.DEAD.value,
                "outcomes": _OUTCOME_STATES,
                "ended": _ENDED_STATES,
            },
        )
        row = cursor.fetchone()
    assert row is not None
    runs, succeeded, outcomes, started, retried, dead = row[:6]
    counts = row[12]
    if isinstance(counts, str):
        counts = json.loads(counts)
    return JobFigures(
        window=window,
        runs=runs,
        run_counts={str(k): int(v) for k, v in (counts or {}).items()},
        last_outcome=row[10],
        last_finished_at=row[11],
        success_rate=_ratio(succeeded, outcomes),
        retry_rate=_ratio(retried, started),
        dead_letters=dead,
        lateness_p50=_seconds(row[6]),
        lateness_p99=_seconds(row[7]),
        start_lag_p50=_seconds(row[8]),
        start_lag_p99=_seconds(row[9]),
    )
