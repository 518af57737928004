"""The overview's running-limits panel: each limited tenant's limit, runs running, runs waiting.

One statement, bounded: at most LIMITED_SHOWN tenants, and each count stops early (the running
count just past the limit, the waiting counts at WAITING_COUNTED), through run_tenant_state and
the partial index of a tenant's parked runs (jobs/services/running_limits.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from jobs.services.running_limits import Hold
from jobs.states import RunState

LIMITED_SHOWN = 50
WAITING_COUNTED = 10_000

_SQL = f"""
SELECT t.name, t.max_running_runs,
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun r
                               WHERE r.tenant_id = t.id AND r.state = '{RunState.RUNNING.value}'
                               LIMIT t.max_running_runs + 1) AS running),
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun r
                               WHERE r.tenant_id = t.id
                                 AND r.state = '{RunState.RETRY_WAIT.value}'
                                 AND r.held_by = '{Hold.TENANT.value}'
                               LIMIT {WAITING_COUNTED}) AS waiting),
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun r
                               WHERE r.tenant_id = t.id
                                 AND r.state = '{RunState.RETRY_WAIT.value}'
                                 AND r.held_by = '{Hold.JOB.value}'
                               LIMIT {WAITING_COUNTED}) AS job_waiting)
  FROM jobs_tenant t
 WHERE t.max_running_runs IS NOT NULL {{tenant}}
 ORDER BY t.name
 LIMIT {LIMITED_SHOWN}
"""


@dataclass(frozen=True)
class TenantLimit:
    tenant: str
    limit: int
    running: int
    # Parked by the tenant's limit, and by their jobs' own limits.
    waiting: int
    waiting_for_job: int

    @property
    def percent(self) -> int:
        """The share of the limit in use, for the bar (capped at 100)."""
        return min(100, round(100 * self.running / self.limit)) if self.limit else 0


def running_limits(*, tenant_id: int | None) -> list[TenantLimit]:
    """The limited tenants in scope (one tenant, or all), by name."""
    clause, params = ("AND t.id = %s", [tenant_id]) if tenant_id is not None else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(_SQL.replace("{tenant}", clause), params)
        return [TenantLimit(*row) for row in cursor.fetchall()]
