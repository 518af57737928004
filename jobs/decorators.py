"""Client-code decorators: @scheduled declares a schedule, @idempotent dedups any Celery task."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import transaction

from beat_engine.clock import SystemClock
from jobs import metrics
from jobs.models import JobSource, TargetKind, Tenant
from jobs.registry import register_callable
from jobs.services.dedup import dedup_record
from jobs.services.jobs import JobInput

F = TypeVar("F", bound=Callable[..., Any])

# JobInput fields a declaration may set besides its schedule, target and name.
_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(JobInput)) - {
    "name",
    "target_kind",
    "target_name",
    "target_url",
    "cron",
    "interval",
    "run_at",
    "timezone",
    "critical",
    "source",
    # Parents are named with after=[...] and resolved to job ids by sync_schedules.
    "depends_on",
}

# Set on a decorated function or task: the job name other declarations' after=[...] may use.
DECLARED_NAME_ATTR = "scheduled_job_name"


@dataclass(frozen=True)
class ScheduleDeclaration:
    name: str
    target_kind: str
    target_name: str
    cron: str | None
    interval: timedelta | None
    tz: str
    critical: bool
    options: Mapping[str, Any] = field(default_factory=dict)
    # Names of the declarations (jobs) this one runs after; then cron and interval are None.
    after: tuple[str, ...] = ()

    def job_input(self) -> JobInput:
        return JobInput(
            name=self.name,
            target_kind=self.target_kind,
            target_name=self.target_name,
            cron=self.cron,
            interval=self.interval,
            timezone=self.tz,
            critical=self.critical,
            source=JobSource.DECORATOR,
            **dict(self.options),
        )


@dataclass
class DeclaredSchedules:
    by_name: dict[str, ScheduleDeclaration] = field(default_factory=dict)

    def add(self, declaration: ScheduleDeclaration) -> None:
        existing = self.by_name.get(declaration.name)
        if existing is not None and existing != declaration:
            raise ValueError(f"schedule {declaration.name!r} is declared twice, differently")
        self.by_name[declaration.name] = declaration

    def all(self) -> list[ScheduleDeclaration]:
        return sorted(self.by_name.values(), key=lambda d: d.name)


declared_schedules = DeclaredSchedules()


def _is_celery_task(obj: Any) -> bool:
    return (
        callable(obj)
        and hasattr(obj, "apply_async")
        and isinstance(getattr(obj, "name", None), str)
    )


def _parent_name(parent: Any) -> str:
    if isinstance(parent, str) and parent:
        return parent
    declared = getattr(parent, DECLARED_NAME_ATTR, None)
    if isinstance(declared, str):
        return declared
    raise TypeError(
        f"@scheduled(after=...) takes job names or @scheduled functions and tasks, not {parent!r}"
    )


def scheduled(
    *,
    cron: str | None = None,
    interval: timedelta | int | None = None,
    after: Sequence[Any] | None = None,
    tz: str = "UTC",
    critical: bool = False,
    name: str | None = None,
    records_own_key: bool = False,
    **options: Any,
) -> Callable[[F], F]:
    """Declare a schedule for a function (a callable target) or a Celery task (a task target).

    ``manage.py sync_schedules --tenant NAME`` turns declarations into jobs. ``options`` are
    further JobInput fields (payload, queue, max_attempts, timeout, concurrency_policy,
    trigger_rule, ...). A function receives a RunContext; a task receives
    ``(payload, scheduler_context=dict)``.

    ``after=[...]`` instead of a schedule makes a dependent job: it runs after the named
    declarations (job names, or the decorated functions and tasks themselves), once per
    logical time of its roots (docs/dags.md). Names may refer to declarations made later.
    """
    given = [kind for kind, value in (("cron", cron), ("interval", interval), ("after", after))
             if value is not None]  # fmt: skip
    if len(given) != 1:
        raise TypeError("@scheduled needs exactly one of cron=, interval= or after=")
    if after is not None and (isinstance(after, str) or not after):
        raise TypeError("@scheduled(after=...) takes a non-empty list of parents")
    parents = tuple(dict.fromkeys(_parent_name(parent) for parent in after or ()))
    unknown = set(options) - _OPTION_FIELDS
    if unknown:
        raise TypeError(f"@scheduled got unknown options: {', '.join(sorted(unknown))}")
    every = timedelta(seconds=interval) if isinstance(interval, int) else interval

    def decorate(obj: F) -> F:
        if _is_celery_task(obj):
            kind, target = TargetKind.TASK, str(obj.name)  # type: ignore[attr-defined]
        else:
            kind, target = TargetKind.CALLABLE, name or f"{obj.__module__}.{obj.__qualname__}"
            register_callable(target, records_own_key=records_own_key)(obj)
        declared_schedules.add(
            ScheduleDeclaration(
                name=name or target,
                target_kind=kind,
                target_name=target,
                cron=cron,
                interval=every,
                tz=tz,
                critical=critical,
                options=dict(options),
                after=parents,
            )
        )
        setattr(obj, DECLARED_NAME_ATTR, name or target)
        return obj

    return decorate


def _tenant_id(name: str, now: datetime) -> int:
    # Looked up per call rather than cached: a cached id would outlive a deleted tenant.
    tenant, _ = Tenant.objects.get_or_create(name=name, defaults={"created_at": now})
    return tenant.id


def idempotent(*, key: Callable[..., str], tenant: str = "client-tasks") -> Callable[[F], F]:
    """Run the decorated function at most once per ``key(*args, **kwargs)`` within the dedup window.

    The key is recorded in the same transaction as the function's own database writes, so both
    commit or neither: exactly once for effects in this database, at least once for others.
    Put it under ``@app.task``. A repeat returns None without running.
    """

    def decorate(func: F) -> F:
        scope = f"{func.__module__}.{func.__qualname__}"

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            digest = hashlib.sha256(f"{scope}|{key(*args, **kwargs)}".encode()).hexdigest()
            now = SystemClock().now()
            with transaction.atomic():
                # Another delivery holding the same key blocks on this insert until it commits.
                if not dedup_record(
                    key=f"task:{digest}",
                    tenant_id=_tenant_id(tenant, now),
                    job_id=None,
                    run_id=None,
                    now=now,
                    outcome="task",
                ):
                    metrics.DEDUP_HITS.labels(source="idempotent").inc()
                    return None
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
