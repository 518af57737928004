"""Dependency edges between jobs: validation and writes, under the tenant's DAG lock.

What holds for every tenant's job graph, checked here and nowhere else:

* it is acyclic (a new edge parent -> child is refused when the child already reaches the
  parent, with a message that names the cycle);
* a job has at most ``MAX_PARENTS`` parents, all of its own tenant and none cancelled;
* every root among a job's ancestors has one schedule (kind, expression or interval and
  anchor, time zone), or the parents would never run for the same logical time.

Every transaction that can break one of these (a create or PATCH naming parents, a PATCH of a
job's schedule or parents, a cancel) first takes the tenant's DAG lock, a transaction-scoped
PostgreSQL advisory lock, before any job row lock (one lock order, docs/architecture.md,
Invariants), and checks inside that transaction, on what committed before it. So two
concurrent PATCHes that would together close a cycle are serialised: the second waits for
the first to commit, then sees its edge and is refused.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from jobs.errors import InvalidInput
from jobs.models import Job, JobDependency, JobKind, JobStatus, Tenant

MAX_PARENTS = 100
FIELD = "depends_on"
# Advisory lock class ("JDAG"); the object is a hash of the tenant id. Two tenants whose ids
# hash alike only wait for each other; nothing else takes locks of this class.
_LOCK_CLASS = 0x4A444147

_DESCENDANTS_SQL = """
WITH RECURSIVE down(id) AS (
    SELECT child_id FROM jobs_jobdependency WHERE parent_id = %s
    UNION
    SELECT e.child_id FROM jobs_jobdependency e JOIN down ON e.parent_id = down.id
)
SELECT id FROM down
"""

# The roots among the ancestors of every job of ``starts`` and of every job below them: all of
# them are roots of some job below the first start, so they must share one schedule. UNION
# visits each job once, however many paths lead to it.
_ROOTS_SQL = """
WITH RECURSIVE down(id) AS (
    SELECT unnest(%(starts)s::uuid[])
    UNION
    SELECT e.child_id FROM jobs_jobdependency e JOIN down ON e.parent_id = down.id
     WHERE %(with_descendants)s
), up(id) AS (
    SELECT id FROM down
    UNION
    SELECT e.parent_id FROM jobs_jobdependency e JOIN up ON e.child_id = up.id
)
SELECT j.id, j.name, j.kind, j.cron_expression, j.interval_seconds, j.anchor_at, j.run_at,
       j.timezone
  FROM up JOIN jobs_job j ON j.id = up.id
 WHERE j.kind <> %(dependent)s
 ORDER BY j.name, j.id
"""


@dataclass(frozen=True)
class _Root:
    id: uuid.UUID
    name: str
    kind: str
    cron: str
    interval_seconds: int | None
    anchor_at: datetime | None
    run_at: datetime | None
    timezone: str

    @property
    def schedule_key(self) -> tuple[object, ...]:
        if self.kind == JobKind.CRON:
            return (self.kind, self.cron, self.timezone)
        if self.kind == JobKind.INTERVAL:
            return (self.kind, self.interval_seconds, self.anchor_at, self.timezone)
        return (self.kind, self.run_at, self.timezone)

    def describe(self) -> str:
        if self.kind == JobKind.CRON:
            schedule = f"cron {self.cron!r}"
        elif self.kind == JobKind.INTERVAL:
            anchor = self.anchor_at.isoformat() if self.anchor_at else "?"
            schedule = f"every {self.interval_seconds} s from {anchor}"
        else:
            schedule = f"once at {self.run_at.isoformat() if self.run_at else '?'}"
        return f"{self.name!r} ({schedule}, {self.timezone})"


def lock_tenant_dag(tenant_id: int) -> None:
    """Hold the tenant's DAG lock until the transaction ends; take it before any job row."""
    assert connection.in_atomic_block, "the DAG lock is transaction-scoped"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, hashint8(%s))", [_LOCK_CLASS, tenant_id])


def lock_dag_of_job(job_id: uuid.UUID) -> None:
    """The DAG lock of the job's tenant (a job never changes tenant, so an unlocked read will
    do); a missing job raises Job.DoesNotExist, as the row lock after it would."""
    tenant_id = Job.objects.values_list("tenant_id", flat=True).get(id=job_id)
    lock_tenant_dag(tenant_id)


def normalize_parents(depends_on: Iterable[uuid.UUID] | None) -> list[uuid.UUID]:
    """The parent ids in a stable order; refuses repeats and more than MAX_PARENTS."""
    parents = list(depends_on or ())
    if len(parents) > MAX_PARENTS:
        raise InvalidInput(FIELD, f"at most {MAX_PARENTS} parents; got {len(parents)}")
    seen: set[uuid.UUID] = set()
    for parent in parents:
        if parent in seen:
            raise InvalidInput(FIELD, f"lists job {parent} twice")
        seen.add(parent)
    return sorted(parents)


def parent_ids_of(job_id: uuid.UUID) -> list[uuid.UUID]:
    return sorted(JobDependency.objects.filter(child_id=job_id).values_list("parent_id", flat=True))


def dependents_of(job_id: uuid.UUID) -> list[Job]:
    """The job's direct children, cancelled ones included, by name."""
    return list(Job.objects.filter(parent_edges__parent_id=job_id).order_by("name", "id"))


def descendant_ids_of(job_id: uuid.UUID) -> set[uuid.UUID]:
    with connection.cursor() as cursor:
        cursor.execute(_DESCENDANTS_SQL, [job_id])
        return {row[0] for row in cursor.fetchall()}


def _label(job: Job) -> str:
    return f"{job.name!r} ({job.id})"


def _parents_checked(tenant_id: int, parents: Sequence[uuid.UUID]) -> list[Job]:
    found = {job.id: job for job in Job.objects.filter(tenant_id=tenant_id, id__in=parents)}
    for parent in parents:
        # Another tenant's job reads as missing: its existence is not this tenant's business.
        if parent not in found:
            raise InvalidInput(FIELD, f"no job {parent} in this tenant")
        if found[parent].status == JobStatus.CANCELLED:
            raise InvalidInput(FIELD, f"job {_label(found[parent])} is cancelled")
    return [found[parent] for parent in parents]


def _cycle_through(job: Job, parents: Sequence[Job]) -> list[uuid.UUID] | None:
    """A path job -> ... -> p for a new parent p already below job, or None: with the new edge
    p -> job it closes a cycle."""
    if any(parent.id == job.id for parent in parents):
        return [job.id]
    below = descendant_ids_of(job.id)
    targets = {parent.id for parent in parents} & below
    if not targets:
        return None
    # Breadth-first over the edges among the job and its descendants, for the shortest path.
    children: dict[uuid.UUID, list[uuid.UUID]] = {}
    for parent_id, child_id in JobDependency.objects.filter(
        parent_id__in=[job.id, *below]
    ).values_list("parent_id", "child_id"):
        children.setdefault(parent_id, []).append(child_id)
    previous: dict[uuid.UUID, uuid.UUID] = {}
    queue = deque([job.id])
    while queue:
        node = queue.popleft()
        if node in targets:
            path = [node]
            while path[-1] != job.id:
                path.append(previous[path[-1]])
            return path[::-1]
        for child in sorted(children.get(node, ())):
            if child not in previous and child != job.id:
                previous[child] = node
                queue.append(child)
    raise AssertionError("a descendant is reachable from its ancestor")


def _refuse_cycle(job: Job, path: list[uuid.UUID]) -> None:
    names = dict(Job.objects.filter(id__in=path).values_list("id", "name"))
    cycle = [*path, job.id]
    text = " -> ".join(f"{names[node]!r} ({node})" for node in cycle)
    raise InvalidInput(FIELD, f"would close a cycle: {text}")


def check_roots_agree(starts: Sequence[uuid.UUID], *, field: str, descendants: bool) -> None:
    """Refuse when the roots above ``starts`` (and, with ``descendants``, above every job below
    them) do not share one schedule. Reads the rows as this transaction has written them."""
    with connection.cursor() as cursor:
        cursor.execute(
            _ROOTS_SQL,
            {
                "starts": list(starts),
                "with_descendants": descendants,
                "dependent": JobKind.DEPENDENT.value,
            },
        )
        roots = [_Root(*row) for row in cursor.fetchall()]
    if len({root.schedule_key for root in roots}) > 1:
        listed = "; ".join(root.describe() for root in roots[:10])
        more = f"; and {len(roots) - 10} more" if len(roots) > 10 else ""
        raise InvalidInput(
            field,
            "every root among a job's ancestors must have the same schedule (kind, expression "
            f"or interval and anchor, time zone), or they never share a logical time; the "
            f"roots here differ: {listed}{more}",
        )


def edges_set(job: Job, depends_on: Sequence[uuid.UUID], *, now: datetime) -> bool:
    """Make ``depends_on`` the job's parents; True when an edge was added or removed.

    The caller holds the tenant's DAG lock and has saved the job (its kind and schedule as they
    will be). Raises InvalidInput on a missing, foreign or cancelled parent, a cycle, or roots
    whose schedules differ; the caller's transaction then writes nothing.
    """
    parents = normalize_parents(depends_on)
    current = set(parent_ids_of(job.id))
    if set(parents) == current:
        return False
    checked = _parents_checked(job.tenant_id, parents)
    added = [parent for parent in checked if parent.id not in current]
    path = _cycle_through(job, added)
    if path is not None:
        _refuse_cycle(job, path)
    removed = current - set(parents)
    if removed:
        JobDependency.objects.filter(child_id=job.id, parent_id__in=removed).delete()
    JobDependency.objects.bulk_create(
        [
            JobDependency(tenant_id=job.tenant_id, parent=parent, child=job, created_at=now)
            for parent in added
        ]
    )
    check_roots_agree([job.id], field=FIELD, descendants=True)
    return True


def edges_create_for_new(job: Job, depends_on: Sequence[uuid.UUID], *, now: datetime) -> None:
    """The edges of a job just inserted (create, bulk create, sync): it has no children, so no
    cycle can pass through it and only its own roots need agree."""
    parents = normalize_parents(depends_on)
    if not parents:
        return
    checked = _parents_checked(job.tenant_id, parents)
    JobDependency.objects.bulk_create(
        [
            JobDependency(tenant_id=job.tenant_id, parent=parent, child=job, created_at=now)
            for parent in checked
        ]
    )
    check_roots_agree([job.id], field=FIELD, descendants=False)


def parents_by_name(tenant: Tenant, names: Iterable[str], *, field: str = FIELD) -> list[uuid.UUID]:
    """The ids of the tenant's live jobs with these names (declarations name their parents)."""
    wanted = list(names)
    found = dict(
        Job.objects.filter(tenant=tenant, name__in=wanted)
        .exclude(status=JobStatus.CANCELLED)
        .values_list("name", "id")
    )
    for name in wanted:
        if name not in found:
            raise InvalidInput(field, f"no live job named {name!r} in this tenant")
    return [found[name] for name in wanted]
