"""Errors the services raise; the API maps each to one HTTP status."""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of every error a caller of the services is expected to handle."""


class InvalidInput(SchedulerError):
    """A field has a value the scheduler refuses; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidSchedule(InvalidInput):
    """The schedule (cron, interval, run_at or timezone) is malformed or never fires."""


class TargetNotFound(InvalidInput):
    """The target names a callable or task that this deployment does not register."""


class VersionConflict(SchedulerError):
    """The caller's version of the job is stale: someone changed it since it was read."""

    def __init__(self, *, expected: int, actual: int) -> None:
        super().__init__(f"job version is {actual}, request was based on version {expected}")
        self.expected = expected
        self.actual = actual


class InvalidTransition(SchedulerError):
    """The object is not in a state that allows the requested change."""


class IdempotencyKeyReused(SchedulerError):
    """An idempotency key already used by the tenant came with a different request body."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} was already used with a different request")
        self.key = key


class HistoryArchived(SchedulerError):
    """What was asked for is in the run-history archive, no longer in the runs table; ``span``
    says which days (docs/history.md, "Archive")."""

    def __init__(self, message: str, span: dict[str, object]) -> None:
        super().__init__(message)
        self.span = span


class HasDependents(SchedulerError):
    """The job has live dependent jobs; cancelling it alone would leave them never running."""

    def __init__(self, dependents: list[tuple[str, str]]) -> None:
        # (job id, name) of each live direct dependent, by name.
        listed = ", ".join(f"{name!r} ({job_id})" for job_id, name in dependents)
        super().__init__(
            f"the job has live dependents: {listed}; cancel them first, or cancel with "
            "cascade to cancel them too"
        )
        self.dependents = dependents
