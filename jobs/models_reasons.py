"""Recorded decisions: why a firing did not run, or ran late (docs/operations.md, "Reasons").

Two bounded tables, written where the decision is taken:

* ``JobEvent`` — an operator's change of a job (pause, resume, cancel, edit), one row per
  change, stamped with the database's clock, so "was it paused at 14:00?" has an answer after
  it was resumed.
* ``DecisionReason`` — the engine's decisions that leave no run behind or delay one, one row
  per decision, never one per firing: a catch-up that skipped a million firings writes one row
  with the range and the count; a firing held back by its tenant's limit for a minute writes
  one row whose count grows with each look.

Both are purged after ``SCHEDULER["REASON_RETENTION_DAYS"]`` (jobs.services.reasons).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class JobEventKind(models.TextChoices):
    PAUSED = "paused", "Paused"
    RESUMED = "resumed", "Resumed"
    CANCELLED = "cancelled", "Cancelled"
    UPDATED = "updated", "Definition changed"


class JobEvent(models.Model):
    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        "jobs.Job", on_delete=models.CASCADE, related_name="events", db_index=False
    )
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="job_events", db_index=False
    )
    kind = models.CharField(max_length=16, choices=JobEventKind.choices)
    # The database's clock at the change's transaction (one clock, docs/architecture.md,
    # Invariants): compared with firing instants, which that clock decided.
    at = models.DateTimeField()
    # The job's version after the change.
    version = models.PositiveIntegerField()
    # For an edit: the schedule fields as they were before it (bounded: a few short strings).
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["job", "at"], name="job_event_by_job"),
            models.Index(fields=["at"], name="job_event_by_time"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=JobEventKind.values), name="job_event_kind_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id} at {self.at.isoformat()}"


class ReasonKind(models.TextChoices):
    # Firings first_at..last_at (count of them) recorded as missed by the catch-up policy or
    # the starting deadline.
    MISSED_CATCH_UP = "missed_catch_up", "Missed by catch-up policy"
    # The firing at first_at was held back count times, from recorded_at to updated_at,
    # because its tenant was at max_queued_runs; or its run waited that many times to start
    # because its tenant or its job had max_running_runs running (detail says which limit).
    DEFERRED_TENANT_LIMIT = "deferred_tenant_limit", "Deferred by tenant limit"
    # The run of the firing at first_at was held back count times by its target's rate limit
    # (jobs/target_limits.py): it waited in retry_wait, no attempt spent; detail says which.
    DEFERRED_TARGET_LIMIT = "deferred_target_limit", "Deferred by target rate limit"
    # Its target answered 429/503 count times; the run waited as above, no attempt spent.
    THROTTLED_BY_TARGET = "throttled_by_target", "Throttled by its target"


class DecisionReason(models.Model):
    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        "jobs.Job", on_delete=models.CASCADE, related_name="decision_reasons", db_index=False
    )
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="decision_reasons", db_index=False
    )
    kind = models.CharField(max_length=32, choices=ReasonKind.choices)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    count = models.PositiveBigIntegerField()
    # The database's clock when the decision was first and last taken.
    recorded_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    detail = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["updated_at"], name="decision_reason_by_time"),
        ]
        constraints = [
            # One row per decision: the tenant-limit deferrals of a firing add to one row.
            models.UniqueConstraint(
                fields=["job", "kind", "first_at"], name="decision_reason_unique"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=ReasonKind.values), name="decision_reason_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(last_at__gte=models.F("first_at"), count__gte=1),
                name="decision_reason_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id} {self.first_at.isoformat()} x{self.count}"
