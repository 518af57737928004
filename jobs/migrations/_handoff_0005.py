"""The DAG hand-off function and triggers exactly as migration 0005 installed them.

Frozen here so that migration 0005 means the same on every database whatever
jobs/services/dag_handoff.py says today; migration 0012 installs the current version.
"""

INSTALL_SQL = r"""
CREATE OR REPLACE FUNCTION jobs_run_handoff() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $handoff$
DECLARE
    t timestamptz := NEW.scheduled_for;
    -- The parent's finish, written with the caller's (database) clock; the children are due
    -- then, i.e. at once.
    at_ timestamptz := COALESCE(NEW.finished_at, clock_timestamp());
    failed boolean := NEW.state <> 'succeeded';
    doomed uuid[] := '{}';
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
        SELECT COALESCE(array_agg(job_id), '{}') INTO doomed FROM down;
    END IF;
    -- Children whose trigger rule this outcome may have met.
    SELECT COALESCE(array_agg(DISTINCT d.child_id), '{}') INTO candidates
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
        WITH ids AS (SELECT x.job_id, gen_random_uuid() AS id FROM unnest(doomed) AS x(job_id)),
        ups AS (
            SELECT d.child_id,
                   array_agg(COALESCE(r.id, p.id) ORDER BY COALESCE(r.id, p.id))
                       FILTER (WHERE COALESCE(r.id, p.id) IS NOT NULL) AS ids
              FROM ids c JOIN jobs_jobdependency d ON d.child_id = c.job_id
              LEFT JOIN jobs_jobrun r ON r.job_id = d.parent_id AND r.scheduled_for = t
              LEFT JOIN ids p ON p.job_id = d.parent_id
             GROUP BY d.child_id
        )
        INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at, attempt, epoch, dedup_key, finished_at, last_error, created_at, worker, cancel_requested, replayed_count, upstream_run_ids)
        SELECT ids.id, j.id, j.tenant_id, j.partition, t, 'upstream',
               'upstream_failed', NULL, 0, 0, encode(sha256(convert_to(j.id::text || '|' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00', 'UTF8')), 'hex'),
               at_, reason, at_, '', false, 0, COALESCE(ups.ids, '{}')
          FROM ids JOIN jobs_job j ON j.id = ids.job_id
          LEFT JOIN ups ON ups.child_id = ids.job_id
        ON CONFLICT (job_id, scheduled_for) DO NOTHING;
    END IF;
    INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state, due_at, attempt, epoch, dedup_key, finished_at, last_error, created_at, worker, cancel_requested, replayed_count, upstream_run_ids)
    SELECT gen_random_uuid(), j.id, j.tenant_id, j.partition, t, 'upstream',
           'pending', at_, 0, 0, encode(sha256(convert_to(j.id::text || '|' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00', 'UTF8')), 'hex'),
           NULL, '', at_, '', false, 0, ups.ids
      FROM unnest(candidates) AS c(id)
      JOIN jobs_job j ON j.id = c.id
     CROSS JOIN LATERAL (
           SELECT COALESCE(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.id IS NOT NULL),
                           '{}') AS ids,
                  count(*) AS parents,
                  count(*) FILTER (WHERE r.state = 'succeeded') AS ok,
                  count(*) FILTER (WHERE r.state IN ('cancelled', 'dead', 'failed', 'missed', 'skipped', 'succeeded', 'upstream_failed')) AS done
             FROM jobs_jobdependency d
             LEFT JOIN jobs_jobrun r ON r.job_id = d.parent_id AND r.scheduled_for = t
            WHERE d.child_id = j.id) AS ups
     WHERE CASE j.trigger_rule WHEN 'all_done' THEN ups.done ELSE ups.ok END = ups.parents
    ON CONFLICT (job_id, scheduled_for) DO UPDATE
       SET state = EXCLUDED.state, due_at = EXCLUDED.due_at, finished_at = NULL,
           last_error = '', upstream_run_ids = EXCLUDED.upstream_run_ids
     WHERE jobs_jobrun.state = 'upstream_failed';
    RETURN NULL;
END
$handoff$;

DROP TRIGGER IF EXISTS jobs_run_handoff_insert ON jobs_jobrun;
CREATE TRIGGER jobs_run_handoff_insert AFTER INSERT ON jobs_jobrun FOR EACH ROW
    WHEN (NEW.state IN ('cancelled', 'dead', 'failed', 'missed', 'skipped', 'succeeded'))
    EXECUTE FUNCTION jobs_run_handoff();
DROP TRIGGER IF EXISTS jobs_run_handoff_update ON jobs_jobrun;
CREATE TRIGGER jobs_run_handoff_update AFTER UPDATE OF state ON jobs_jobrun FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ('cancelled', 'dead', 'failed', 'missed', 'skipped', 'succeeded'))
    EXECUTE FUNCTION jobs_run_handoff();
"""

UNINSTALL_SQL = r"""
DROP TRIGGER IF EXISTS jobs_run_handoff_insert ON jobs_jobrun;
DROP TRIGGER IF EXISTS jobs_run_handoff_update ON jobs_jobrun;
DROP FUNCTION IF EXISTS jobs_run_handoff();
"""
