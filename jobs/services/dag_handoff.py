"""The hand-off between a parent's run and its children's runs for the same logical time T.

Where it happens: a row trigger on ``jobs_jobrun`` (installed by migration 0005, SQL below)
fires when a run reaches a terminal state, by update or by insert, so the child runs are
written in the very transaction, and by the very statement, that records the parent's deciding
outcome, whichever path recorded it: a worker's outcome (succeeded, failed, dead, cancelled),
the start's policy skip, a cancel, the engine's missed firings and expired leases. A crash right
after that commit loses nothing (nothing lost, docs/architecture.md, Invariants): the child's
run is a ``pending`` row due at the parent's finish, which the engine's timers queue like any
pending run, and the outbox sweep republishes it if its message is lost. The wake-up
(``wake_children``) only saves the wait for the next timer poll.

What it writes, set-based, for a parent run of job P at T that ended in state S:

* S = succeeded: every child of P whose trigger rule is now met gets a run for T, ``pending``
  and due at once (all_success: every parent's run for T succeeded; all_done: every parent's
  run for T is terminal); an all_success child whose run for T is ``upstream_failed`` (a parent
  failed, was replayed and now succeeded) is re-armed to ``pending``.
* S = failed, dead, cancelled, skipped or missed: every all_success descendant reachable
  through all_success jobs (a recursive CTE) gets a run for T in ``upstream_failed``, naming the
  failed run; then every all_done child of P or of those descendants whose parents' runs for T
  are all terminal (upstream_failed included) gets its pending run.

Races: two parents of one child finishing at once each see the other's run as it was before
their own statement, so each could conclude "not yet" (or both "now"). Each hand-off therefore
takes a transaction advisory lock on (child, T) for every child with more than one parent,
in key order, before reading the parents' runs in a new statement: the second one waits until
the first commits and then reads its outcome. The unique firing key (job, scheduled_for) with
ON CONFLICT DO NOTHING decides the rest (one run per firing, docs/architecture.md, Invariants):
the key is a unique index of each day partition (docs/history.md, "Partitions"), which a
conflict target cannot name, so re-arming an upstream_failed child is an UPDATE in a statement
of its own after the INSERT, which sees the conflicting row once its writer committed. Those
locks are taken by the hand-off alone, after the parent's run row, so they add no edge to the
job-then-runs lock order (one lock order, docs/architecture.md, Invariants).

The statements run in the trigger's PL/pgSQL, each on a fresh READ COMMITTED snapshot (a
VOLATILE function), which is what makes "lock, then read" see what committed meanwhile.

The runs of T are read with their id range (``lo``, ``hi``: the ids of T's millisecond,
jobs/run_ids.py) beside (job, scheduled_for), so each read prunes to T's partition.
"""

from __future__ import annotations

from django.db import connection

from jobs.errors import InvalidTransition
from jobs.models import Job, JobKind, RunTrigger
from jobs.notify import notify_timers_due
from jobs.services.dedup import dedup_key_sql
from jobs.states import TERMINAL_STATES, RunState

# States that decide a child's run for T when a parent's run enters them. upstream_failed is
# left out of the trigger: only the hand-off writes it, and it propagates it itself.
_DECIDING = sorted(state.value for state in TERMINAL_STATES - {RunState.UPSTREAM_FAILED})
_TERMINAL = sorted(state.value for state in TERMINAL_STATES)


def _sql_list(values: list[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)


_RUN_COLUMNS = (
    "id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at, attempt, epoch, "
    "dedup_key, finished_at, last_error, created_at, worker, cancel_requested, replayed_count, "
    "upstream_run_ids"
)

# The candidates whose trigger rule is met for T, with their parents' runs for T (in PL/pgSQL
# scope: candidates, t, lo, hi).
_MET_SQL = f"""
        SELECT c.id AS job_id, ups.ids
          FROM unnest(candidates) AS c(id)
          JOIN jobs_job j ON j.id = c.id
         CROSS JOIN LATERAL (
               SELECT COALESCE(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.id IS NOT NULL),
                               '{{}}') AS ids,
                      count(*) AS parents,
                      count(*) FILTER (WHERE r.state = '{RunState.SUCCEEDED.value}') AS ok,
                      count(*) FILTER (WHERE r.state IN ({_sql_list(_TERMINAL)})) AS done
                 FROM jobs_jobdependency d
                 LEFT JOIN jobs_jobrun r ON r.job_id = d.parent_id AND r.scheduled_for = t
                                        AND r.id BETWEEN lo AND hi
                WHERE d.child_id = j.id) AS ups
         WHERE CASE j.trigger_rule WHEN 'all_done' THEN ups.done ELSE ups.ok END = ups.parents
"""

# The function the triggers call, kept here beside what it means. Migration 0005 installs it
# (CREATE OR REPLACE); the check jobs.E007 (handoff_problem below) reports a database whose
# installed body is not this one, so a change here ships with a migration that runs INSTALL_SQL.
HANDOFF_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION jobs_run_handoff() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $handoff$
DECLARE
    t timestamptz := NEW.scheduled_for;
    lo uuid := jobs_run_id_floor(NEW.scheduled_for);
    hi uuid := jobs_run_id_ceil(NEW.scheduled_for);
    -- The parent's finish, written with the caller's (database) clock; the children are due
    -- then, i.e. at once.
    at_ timestamptz := COALESCE(NEW.finished_at, clock_timestamp());
    failed boolean := NEW.state <> '{RunState.SUCCEEDED.value}';
    doomed uuid[] := '{{}}';
    candidates uuid[];
    reason text;
BEGIN
    -- Most jobs have no children: one probe of job_dependency_unique (parent, child).
    IF NOT EXISTS (SELECT 1 FROM jobs_jobdependency WHERE parent_id = NEW.job_id) THEN
        RETURN NULL;
    END IF;
    IF failed THEN
        WITH RECURSIVE down(job_id) AS (
            SELECT d.child_id FROM jobs_jobdependency d JOIN jobs_job j ON j.id = d.child_id
             WHERE d.parent_id = NEW.job_id AND j.trigger_rule = 'all_success'
               AND j.status <> 'cancelled'
            UNION
            SELECT d.child_id FROM down JOIN jobs_jobdependency d ON d.parent_id = down.job_id
              JOIN jobs_job j ON j.id = d.child_id
             WHERE j.trigger_rule = 'all_success' AND j.status <> 'cancelled'
        )
        SELECT COALESCE(array_agg(job_id), '{{}}') INTO doomed FROM down;
    END IF;
    -- Children whose trigger rule this outcome may have met.
    SELECT COALESCE(array_agg(DISTINCT d.child_id), '{{}}') INTO candidates
      FROM jobs_jobdependency d JOIN jobs_job j ON j.id = d.child_id
     WHERE d.parent_id = ANY(array_prepend(NEW.job_id, doomed)) AND j.status <> 'cancelled'
       AND (NOT failed OR j.trigger_rule = 'all_done');
    -- Serialise with the other parents' hand-offs of the same child and T (module docstring).
    PERFORM pg_advisory_xact_lock(s.k) FROM (
        SELECT DISTINCT hashtextextended(c.id::text,
                                         (extract(epoch FROM t) * 1000000)::bigint) AS k
          FROM unnest(candidates) AS c(id)
         WHERE (SELECT count(*) FROM (SELECT 1 FROM jobs_jobdependency d
                                       WHERE d.child_id = c.id LIMIT 2) AS two) > 1
         ORDER BY k) AS s;
    IF cardinality(doomed) > 0 THEN
        SELECT format('upstream failed: run %s of job %s (%s) for %s ended %s',
                      NEW.id, j.name, j.id, t, NEW.state)
          INTO reason FROM jobs_job j WHERE j.id = NEW.job_id;
        -- Ids drawn first, so that each run can list its parents' runs for T that this same
        -- statement writes; joined, not looked up per run (a CTE has no index).
        WITH ids AS (SELECT x.job_id, jobs_run_id(t) AS id FROM unnest(doomed) AS x(job_id)),
        ups AS (
            SELECT d.child_id,
                   array_agg(COALESCE(r.id, p.id) ORDER BY COALESCE(r.id, p.id))
                       FILTER (WHERE COALESCE(r.id, p.id) IS NOT NULL) AS ids
              FROM ids c JOIN jobs_jobdependency d ON d.child_id = c.job_id
              LEFT JOIN jobs_jobrun r ON r.job_id = d.parent_id AND r.scheduled_for = t
                                     AND r.id BETWEEN lo AND hi
              LEFT JOIN ids p ON p.job_id = d.parent_id
             GROUP BY d.child_id
        )
        INSERT INTO jobs_jobrun ({_RUN_COLUMNS})
        SELECT ids.id, j.id, j.tenant_id, j.partition, t, '{RunTrigger.UPSTREAM.value}',
               '{RunState.UPSTREAM_FAILED.value}', NULL, 0, 0, {dedup_key_sql("j.id", "t")},
               at_, reason, at_, '', false, 0, COALESCE(ups.ids, '{{}}')
          FROM ids JOIN jobs_job j ON j.id = ids.job_id
          LEFT JOIN ups ON ups.child_id = ids.job_id
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO jobs_jobrun ({_RUN_COLUMNS})
    SELECT jobs_run_id(t), j.id, j.tenant_id, j.partition, t, '{RunTrigger.UPSTREAM.value}',
           '{RunState.PENDING.value}', at_, 0, 0, {dedup_key_sql("j.id", "t")},
           NULL, '', at_, '', false, 0, met.ids
      FROM ({_MET_SQL}) AS met JOIN jobs_job j ON j.id = met.job_id
    ON CONFLICT DO NOTHING;
    -- The children whose run for T exists as upstream_failed (a parent failed, was replayed
    -- and now succeeded) are re-armed; a new statement, so a row a concurrent hand-off
    -- committed meanwhile (the INSERT above waited for it) is seen.
    UPDATE jobs_jobrun r
       SET state = '{RunState.PENDING.value}', due_at = at_, finished_at = NULL, last_error = '',
           upstream_run_ids = met.ids
      FROM ({_MET_SQL}) AS met
     WHERE r.job_id = met.job_id AND r.scheduled_for = t AND r.id BETWEEN lo AND hi
       AND r.state = '{RunState.UPSTREAM_FAILED.value}';
    RETURN NULL;
END
$handoff$;
"""

# Row triggers with a WHEN clause: the condition is checked in C for every row and the
# function runs only for runs entering a deciding state, so claims (queued inserts),
# heartbeats (no state column set) and timers (to queued) pay nothing measurable.
HANDOFF_TRIGGERS_SQL = f"""
DROP TRIGGER IF EXISTS jobs_run_handoff_insert ON jobs_jobrun;
CREATE TRIGGER jobs_run_handoff_insert AFTER INSERT ON jobs_jobrun FOR EACH ROW
    WHEN (NEW.state IN ({_sql_list(_DECIDING)}))
    EXECUTE FUNCTION jobs_run_handoff();
DROP TRIGGER IF EXISTS jobs_run_handoff_update ON jobs_jobrun;
CREATE TRIGGER jobs_run_handoff_update AFTER UPDATE OF state ON jobs_jobrun FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ({_sql_list(_DECIDING)}))
    EXECUTE FUNCTION jobs_run_handoff();
"""

UNINSTALL_SQL = """
DROP TRIGGER IF EXISTS jobs_run_handoff_insert ON jobs_jobrun;
DROP TRIGGER IF EXISTS jobs_run_handoff_update ON jobs_jobrun;
DROP FUNCTION IF EXISTS jobs_run_handoff();
"""

INSTALL_SQL = HANDOFF_FUNCTION_SQL + HANDOFF_TRIGGERS_SQL


# The partitions of a run's job's children, for the outcome statement's result (one probe of
# job_dependency_unique for a job without children).
CHILD_PARTITIONS_SQL = """
ARRAY(SELECT DISTINCT j.partition FROM jobs_jobdependency d JOIN jobs_job j ON j.id = d.child_id
       WHERE d.parent_id = {job_id})
"""


def wake_children(partitions: list[int]) -> None:
    """Once the parent's outcome commits, wake the engine nodes owning its children's
    partitions so they queue the children's pending runs now, not at their next timer poll.

    Only a hint (Redis is a hint, docs/architecture.md, Invariants): the child runs are
    committed with the outcome, so a lost message (Redis down, this process killed right after
    the commit) only delays them to the owner's next timer poll (timer_poll_s, 0.5 s); a run
    queued and never pushed is found by the outbox sweep.
    """
    notify_timers_due(partitions)


# The roots above a job: the jobs a run of it for some T must start from.
_ROOTS_SQL = """
WITH RECURSIVE up(id) AS (
    SELECT parent_id FROM jobs_jobdependency WHERE child_id = %s
    UNION
    SELECT e.parent_id FROM jobs_jobdependency e JOIN up ON e.child_id = up.id
)
SELECT j.name, j.id FROM up JOIN jobs_job j ON j.id = up.id
 WHERE NOT EXISTS (SELECT 1 FROM jobs_jobdependency e WHERE e.child_id = j.id)
 ORDER BY j.name, j.id
"""


def refuse_standalone_run(job: Job, *, verb: str) -> None:
    """A dependent job runs only for a logical time its roots fired at, so it is never
    triggered or backfilled on its own: a run for a T its parents never had would break
    "every job of one DAG run shares one T" and could never be decided by its parents.
    Raises InvalidTransition naming the roots to ``verb`` (trigger, backfill) instead."""
    if job.kind != JobKind.DEPENDENT:
        return
    with connection.cursor() as cursor:
        cursor.execute(_ROOTS_SQL, [job.id])
        roots = [f"{name!r} ({root_id})" for name, root_id in cursor.fetchall()]
    listed = ", ".join(roots[:10]) + (f" and {len(roots) - 10} more" if len(roots) > 10 else "")
    raise InvalidTransition(
        f"job {job.name!r} runs after its parents, once per firing of its roots, and cannot be "
        f"{verb}ed on its own; {verb} its root job instead: "
        f"{listed or 'none'}. To run it again for one logical time, replay that run."
    )


_INSTALLED_SQL = """
SELECT (SELECT prosrc FROM pg_proc WHERE proname = 'jobs_run_handoff'),
       (SELECT count(*) FROM pg_trigger
         WHERE tgrelid = 'jobs_jobrun'::regclass AND tgenabled <> 'D'
           AND tgname IN ('jobs_run_handoff_insert', 'jobs_run_handoff_update'))
"""


def handoff_problem() -> str | None:
    """Why this database would not hand off as this code says, or None: the function missing
    or another version of it (a database migrated by other code), or a trigger missing or
    disabled. `manage.py check --database default` reports it (jobs.E007)."""
    with connection.cursor() as cursor:
        cursor.execute(_INSTALLED_SQL)
        row = cursor.fetchone()
    source, triggers = (row[0], row[1]) if row else (None, 0)
    if source == HANDOFF_FUNCTION_SQL.split("$handoff$")[1] and triggers == 2:
        return None
    what = "missing" if source is None else "another version" if triggers == 2 else "not enabled"
    return (
        f"the DAG hand-off trigger on jobs_jobrun is {what}: dependent jobs would never run. "
        'Install it: python manage.py shell -c "from jobs.services.dag_handoff import install; '
        'install()"'
    )


def install() -> None:
    """(Re)install the hand-off function and its triggers; idempotent (migration 0005 runs the
    same SQL)."""
    with connection.cursor() as cursor:
        cursor.execute(INSTALL_SQL)
