"""Running-concurrency limits: a run over its tenant's or its job's limit waits in the database.

``Tenant.max_running_runs`` and ``Job.max_running_runs`` (null: no limit) bound how many runs
are ``running`` at once, across every worker (docs/limits.md, "Running concurrency"). The
``running`` rows are the slots: nothing else is counted, so nothing can drift, and a crashed
worker's run holds its slot until its lease expires and the reaper moves it on.

API (used by jobs/services/starts.py, jobs/services/runs.py and beat_engine/timers.py):

* ``limited_clause(tenant, job)`` — SQL for the start statement: true when neither has a
  limit, so the one-statement start is taken only by runs nothing limits.
* ``lock_tenant(cursor, run_id)`` — in the start's transaction, before any job row lock: the
  tenant's running-limit lock (a transaction advisory lock) when it has a limit.
* ``hold_for(cursor, ...)`` — which limit holds the run back (None: it may start), counted
  under that lock; ``park(...)`` — the run waits in ``retry_wait`` with ``held_by`` set, no
  attempt spent, its decision recorded (``DecisionReason``, "why didn't it fire?").
* ``release_free_slots(hold, owner, limit, now=)`` — a limit raised or removed: the parked
  runs that now fit are released at once.
* ``release_one_cte(source)`` / ``release_after(cursor, run_ids, now=)`` — when runs leave
  ``running`` (an outcome, the reaper), the same statement or transaction makes the oldest
  parked run of their tenant and of their job due now, and wakes the engine's timers, so it
  starts as soon as the slot frees, not at a poll.

A parked run's ``due_at`` is a backstop (``RUNNING_LIMIT_RECHECK_S``): if no release reaches
it (the limit was raised, a release lost a race), the timer queues it again then and it looks
again. Waiting runs are released oldest firing first (``scheduled_for``, then id), and a run
that arrives while an older one waits for the same limit waits behind it.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper

from jobs import metrics
from jobs.models_reasons import ReasonKind
from jobs.notify import notify_timers_due
from jobs.states import RunState


class Hold(enum.StrEnum):
    """Which limit parked a run (JobRun.held_by)."""

    TENANT = "tenant_running"
    JOB = "job_running"


# A class of its own for pg_advisory_xact_lock(int, int): the tenant's DAG lock uses another.
_LOCK_CLASS = 0x52554E  # "RUN"

_RUNNING = RunState.RUNNING.value
_WAITING = RunState.RETRY_WAIT.value
_QUEUED = RunState.QUEUED.value


def limited_clause(tenant: str, job: str) -> str:
    """True for a run nothing limits: the start statement takes only those without a lock."""
    return f"({tenant}.max_running_runs IS NULL AND {job}.max_running_runs IS NULL)"


def recheck_after() -> timedelta:
    return timedelta(seconds=settings.SCHEDULER["RUNNING_LIMIT_RECHECK_S"])


def lock_tenant(cursor: CursorWrapper, run_id: uuid.UUID) -> int | None:
    """The run's tenant's limit, its lock taken when it has one (held to commit).

    One lock order (docs/architecture.md, Invariants): taken before the job row. Under it,
    starts of one limited tenant count and start one at a time, each seeing what the previous
    committed (READ COMMITTED reads afresh per statement), so two cannot both take the last
    slot. Only starts take it, and they hold no job or run row while waiting for it.
    """
    cursor.execute(
        "SELECT t.id, t.max_running_runs FROM jobs_jobrun r JOIN jobs_tenant t"
        " ON t.id = r.tenant_id WHERE r.id = %s",
        [run_id],
    )
    row = cursor.fetchone()
    if row is None or row[1] is None:
        return None
    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, row[0]])
    # Re-read under the lock: an operator's change committed while this start waited counts.
    cursor.execute("SELECT max_running_runs FROM jobs_tenant WHERE id = %s", [row[0]])
    limit = cursor.fetchone()
    return None if limit is None else limit[0]


# What holds a slot: a running run, and a released run on its way to a worker (made due, or
# queued again by the timer, with held_by still set: the start clears it), so that a newcomer
# never takes the slot a released run was given. Counting stops at the limit: a tenant at a
# limit of 50 costs at most 50 entries of run_tenant_state and of the partial index of its
# held runs; the job's running runs are read through run_in_flight_by_job.
_COUNT_SQL = f"""
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                               WHERE tenant_id = %(tenant)s AND state = '{_RUNNING}'
                               LIMIT %(tenant_limit)s) AS t)
       + (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                                 WHERE tenant_id = %(tenant)s AND held_by = '{Hold.TENANT.value}'
                                   AND state IN ('{_QUEUED}', '{_WAITING}')
                                   AND (state = '{_QUEUED}' OR due_at <= %(now)s)
                                   AND id <> %(run_id)s
                                 LIMIT %(tenant_limit)s) AS tr),
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                               WHERE job_id = %(job)s AND state = '{_RUNNING}'
                               LIMIT %(job_limit)s) AS j)
       + (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                                 WHERE job_id = %(job)s AND held_by = '{Hold.JOB.value}'
                                   AND state IN ('{_QUEUED}', '{_WAITING}')
                                   AND (state = '{_QUEUED}' OR due_at <= %(now)s)
                                   AND id <> %(run_id)s
                                 LIMIT %(job_limit)s) AS jr),
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                               WHERE tenant_id = %(tenant)s AND state = '{_WAITING}'
                                 AND held_by = '{Hold.TENANT.value}' AND due_at > %(now)s
                                 AND (scheduled_for, id) < (%(scheduled_for)s, %(run_id)s)
                               LIMIT %(tenant_limit)s) AS tw),
       (SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun
                               WHERE job_id = %(job)s AND state = '{_WAITING}'
                                 AND held_by = '{Hold.JOB.value}' AND due_at > %(now)s
                                 AND (scheduled_for, id) < (%(scheduled_for)s, %(run_id)s)
                               LIMIT %(job_limit)s) AS jw)
"""


@dataclass(frozen=True)
class Verdict:
    """One limit's word on a run: whether it may start, and how many older waiting runs to
    release now (their slots are free)."""

    start: bool
    release: int = 0


def decide(limit: int | None, *, taken: int, older_waiting: int) -> Verdict:
    """What one limit says (pure). ``taken``: slots held (runs running, and released runs on
    their way to a worker), this run excepted; ``older_waiting``: parked runs of older firings,
    not released yet (counted up to the limit).

    Oldest first: the free slots go to the older waiting runs, which are released, and this
    run starts only if one is left after them; otherwise it waits behind them.
    """
    if limit is None:
        return Verdict(start=True)
    free = limit - taken
    if free <= 0:
        return Verdict(start=False)
    return Verdict(start=free > older_waiting, release=min(free, older_waiting))


def hold_for(
    cursor: CursorWrapper,
    *,
    run_id: uuid.UUID,
    tenant_id: int,
    job_id: uuid.UUID,
    scheduled_for: datetime,
    tenant_limit: int | None,
    job_limit: int | None,
    now: datetime,
) -> Hold | None:
    """Which limit holds the run back (None: it may start), counted under the tenant's lock
    and the job's row lock; older waiting runs that free slots were kept from (a limit raised,
    a release that lost its race) are released on the way, so a slot never idles behind them.

    The job's limit is looked at first: a run held by it is released by its job's next end,
    and then meets its tenant's limit like any other.
    """
    cursor.execute(
        _COUNT_SQL,
        {
            "tenant": tenant_id,
            "job": job_id,
            "tenant_limit": tenant_limit or 0,
            "job_limit": job_limit or 0,
            "scheduled_for": scheduled_for,
            "run_id": run_id,
            "now": now,
        },
    )
    tenant_taken, job_taken, tenant_older, job_older = cursor.fetchone()
    job = decide(job_limit, taken=job_taken, older_waiting=job_older)
    tenant = decide(tenant_limit, taken=tenant_taken, older_waiting=tenant_older)
    hold = Hold.JOB if not job.start else Hold.TENANT if not tenant.start else None
    if hold != Hold.TENANT and job.release:
        _release(cursor, Hold.JOB, job_id, job.release, older_than=(scheduled_for, run_id), now=now)
    if hold != Hold.JOB and tenant.release:
        _release(
            cursor, Hold.TENANT, tenant_id, tenant.release, older_than=(scheduled_for, run_id),
            now=now,
        )  # fmt: skip
    return hold


# Parked as the forbid deferral does (jobs/services/starts.py): back in retry_wait with the
# attempt number the timer will hand out again, so waiting spends no attempt of the budget;
# its error is kept.
_PARK_SQL = f"""
UPDATE jobs_jobrun
   SET state = '{_WAITING}', attempt = attempt - 1, due_at = %(due_at)s, held_by = %(hold)s
 WHERE id = %(run_id)s AND attempt = %(attempt)s AND state = %(queued)s
"""

# One row per firing, its count raised at every wait (docs/operations.md, "Reasons"); the
# detail says the latest limit that held it.
_REASON_SQL = f"""
INSERT INTO jobs_decisionreason (job_id, tenant_id, kind, first_at, last_at, count,
                                 recorded_at, updated_at, detail)
SELECT r.job_id, r.tenant_id, '{ReasonKind.DEFERRED_TENANT_LIMIT.value}', r.scheduled_for,
       r.scheduled_for, 1, %(now)s, %(now)s, %(detail)s
  FROM jobs_jobrun r WHERE r.id = %(run_id)s
ON CONFLICT (job_id, kind, first_at) DO UPDATE
   SET count = jobs_decisionreason.count + 1, detail = EXCLUDED.detail,
       updated_at = GREATEST(jobs_decisionreason.updated_at, EXCLUDED.updated_at)
"""


def hold_detail(hold: Hold, limit: int | None) -> str:
    owner = "tenant" if hold == Hold.TENANT else "job"
    return f"running limit: {owner} had max_running_runs={limit} running"


def park(
    cursor: CursorWrapper,
    *,
    run_id: uuid.UUID,
    attempt: int,
    hold: Hold,
    limit: int | None,
    now: datetime,
) -> bool:
    """queued -> retry_wait (held) for this attempt; False when the attempt is stale."""
    cursor.execute(
        _PARK_SQL,
        {
            "run_id": run_id,
            "attempt": attempt,
            "queued": RunState.QUEUED.value,
            "due_at": now + recheck_after(),
            "hold": hold.value,
        },
    )
    if cursor.rowcount != 1:
        return False
    cursor.execute(_REASON_SQL, {"run_id": run_id, "now": now, "detail": hold_detail(hold, limit)})
    metrics.RUNS_HELD.labels(limit="tenant" if hold == Hold.TENANT else "job").inc()
    return True


# The oldest parked runs of one tenant (or job) older than a firing and not released yet,
# made due now. SKIP LOCKED: a release never waits, and two releases at once pick different
# runs. The ids as one array (an InitPlan, run once): as `id IN (SELECT ... LIMIT n)` the
# planner may rescan the subquery per row, and a rescan skips the rows this statement has
# just updated and takes the next ones, releasing far more than n. A released run keeps
# held_by until it starts, so it holds its slot on its way (_COUNT_SQL) and a newcomer waits
# behind it.
_RELEASE_SQL = {
    hold: f"""
UPDATE jobs_jobrun SET due_at = %(now)s
 WHERE id = ANY(ARRAY(
       SELECT id FROM jobs_jobrun
        WHERE {column} = %(owner)s AND state = '{_WAITING}' AND held_by = '{hold.value}'
          AND due_at > %(now)s AND (scheduled_for, id) < (%(before)s, %(before_id)s)
        ORDER BY scheduled_for, id LIMIT %(n)s FOR UPDATE SKIP LOCKED))
   AND state = '{_WAITING}'
RETURNING partition
"""
    for hold, column in ((Hold.TENANT, "tenant_id"), (Hold.JOB, "job_id"))
}


def _release(
    cursor: CursorWrapper,
    hold: Hold,
    owner: Any,
    n: int,
    *,
    older_than: tuple[datetime, uuid.UUID],
    now: datetime,
) -> int:
    params = {"owner": owner, "n": n, "now": now, "before": older_than[0],
              "before_id": older_than[1]}  # fmt: skip
    cursor.execute(_RELEASE_SQL[hold], params)
    partitions = [row[0] for row in cursor.fetchall()]
    # After commit, so the engine never looks before the release is visible.
    notify_timers_due(partitions)
    return len(partitions)


# For a statement whose CTE {source} returned the run that left running (with its tenant_id
# and job_id): the oldest parked run of its tenant and of its job made due now. A run that
# nothing limits finds nothing through the two partial indexes, which hold only parked runs:
# two empty probes (docs/limits.md, "Cost"). Any statement that moves a run out of running
# adds it (release_one_cte("its CTE")) and wakes RELEASED_PARTITIONS_SQL's partitions.
_RELEASE_ONE_CTE = f""", released AS (
    UPDATE jobs_jobrun AS w SET due_at = %(now)s
     WHERE w.id = ANY(
           ARRAY(SELECT p.id FROM jobs_jobrun AS p, {{source}} AS f
                  WHERE p.tenant_id = f.tenant_id AND p.state = '{_WAITING}'
                    AND p.held_by = '{Hold.TENANT.value}' AND p.due_at > %(now)s
                  ORDER BY p.scheduled_for, p.id LIMIT 1 FOR UPDATE OF p SKIP LOCKED)
           || ARRAY(SELECT p.id FROM jobs_jobrun AS p, {{source}} AS f
                     WHERE p.job_id = f.job_id AND p.state = '{_WAITING}'
                       AND p.held_by = '{Hold.JOB.value}' AND p.due_at > %(now)s
                     ORDER BY p.scheduled_for, p.id LIMIT 1 FOR UPDATE OF p SKIP LOCKED))
       AND w.state = '{_WAITING}'
    RETURNING w.partition
)"""
RELEASED_PARTITIONS_SQL = "ARRAY(SELECT partition FROM released)"


def release_one_cte(source: str) -> str:
    """The ``released`` CTE for a statement whose CTE ``source`` ended one running run."""
    return _RELEASE_ONE_CTE.replace("{source}", source)


# The reaper's release: for each tenant and job, as many parked runs as it had runs reaped.
_RELEASE_AFTER_SQL = {
    hold: f"""
WITH lost AS (SELECT {column} AS owner, count(*) AS n FROM jobs_jobrun
               WHERE id = ANY(%(ids)s::uuid[]) GROUP BY {column})
UPDATE jobs_jobrun SET due_at = %(now)s
 WHERE id = ANY(ARRAY(
       SELECT p.id FROM lost CROSS JOIN LATERAL (
              SELECT id FROM jobs_jobrun
               WHERE {column} = lost.owner AND state = '{_WAITING}'
                 AND held_by = '{hold.value}' AND due_at > %(now)s
               ORDER BY scheduled_for, id LIMIT lost.n FOR UPDATE SKIP LOCKED) AS p))
   AND state = '{_WAITING}'
RETURNING partition
"""
    for hold, column in ((Hold.TENANT, "tenant_id"), (Hold.JOB, "job_id"))
}


def release_after(cursor: CursorWrapper, run_ids: Sequence[uuid.UUID], *, now: datetime) -> int:
    """Runs ``run_ids`` left running (the reaper found their leases expired): release as many
    parked runs of their tenants and jobs, in the caller's transaction. Returns how many."""
    if not run_ids:
        return 0
    partitions: list[int] = []
    for hold in Hold:
        cursor.execute(_RELEASE_AFTER_SQL[hold], {"ids": list(run_ids), "now": now})
        partitions.extend(row[0] for row in cursor.fetchall())
    notify_timers_due(partitions)
    return len(partitions)


# The slots of one tenant (or job) taken now: running, and released on their way.
_TAKEN_SQL = {
    hold: f"""
SELECT (SELECT count(*) FROM jobs_jobrun WHERE {column} = %(owner)s AND state = '{_RUNNING}')
     + (SELECT count(*) FROM jobs_jobrun
         WHERE {column} = %(owner)s AND held_by = '{hold.value}'
           AND state IN ('{_QUEUED}', '{_WAITING}')
           AND (state = '{_QUEUED}' OR due_at <= %(now)s))
"""
    for hold, column in ((Hold.TENANT, "tenant_id"), (Hold.JOB, "job_id"))
}
# Released at once when a limit is removed: as many as the workers can take in a while; the
# rest follow through the releases of their ends and the backstop.
_RELEASED_WITHOUT_LIMIT = 10_000
_LAST = (datetime.max.replace(tzinfo=UTC), uuid.UUID(int=(1 << 128) - 1))


def release_free_slots(hold: Hold, owner: Any, limit: int | None, *, now: datetime) -> int:
    """A limit was raised or removed: release as many parked runs as there are free slots now,
    oldest first, rather than leave them to the next end or the backstop. In the caller's
    transaction (the job's update holds its row; the tenant's change its own)."""
    with connection.cursor() as cursor:
        if limit is None:
            free = _RELEASED_WITHOUT_LIMIT
        else:
            cursor.execute(_TAKEN_SQL[hold], {"owner": owner, "now": now})
            free = limit - int(cursor.fetchone()[0])
        if free <= 0:
            return 0
        return _release(cursor, hold, owner, free, older_than=_LAST, now=now)
