"""Tenants, jobs, runs and attempts, dedup keys, dead letters and partition epochs."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Q

from jobs.run_ids import run_id_for
from jobs.states import AttemptOutcome, RunState


class Tenant(models.Model):
    """A team that owns jobs; every API key and every job belongs to exactly one."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    # Per-tenant cap on runs queued at once, so one tenant's burst cannot starve another's.
    max_queued_runs = models.PositiveIntegerField(default=100_000)
    # Runs of the tenant running at once, across every worker (docs/limits.md, "Running
    # concurrency"); null is no limit, the default: a start of such a tenant's run takes no
    # lock and counts nothing. Set by operators in the admin.
    max_running_runs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Runs of this tenant running at once, across all workers; empty: no limit.",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(max_running_runs__isnull=True) | Q(max_running_runs__gte=1),
                name="tenant_max_running_runs_positive",
            )
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A tenant's API key, stored as a SHA-256 hash; the secret is shown once, at creation."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    # The public prefix finds the row; the hash of the whole key proves it.
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.tenant.name}/{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class TenantMember(models.Model):
    """Scopes a non-superuser staff account to one tenant in the admin."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_membership"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant}"


class JobKind(models.TextChoices):
    ONCE = "once", "One-off"
    CRON = "cron", "Cron"
    INTERVAL = "interval", "Interval"
    # Runs after its parents (JobDependency), once per root firing; no schedule of its own.
    DEPENDENT = "dependent", "After its parents"


class TriggerRule(models.TextChoices):
    # Runs when every parent's run for the same logical time succeeded.
    ALL_SUCCESS = "all_success", "All parents succeeded"
    # Runs when every parent's run for the same logical time is terminal, whatever its outcome.
    ALL_DONE = "all_done", "All parents done"


class JobStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    CANCELLED = "cancelled", "Cancelled"
    # A one-off job after its firing, or a schedule with no further firing.
    COMPLETED = "completed", "Completed"


class TargetKind(models.TextChoices):
    CALLABLE = "callable", "Registered Python callable"
    TASK = "task", "Named Celery task"
    HTTP = "http", "HTTP endpoint"


class ConcurrencyPolicy(models.TextChoices):
    ALLOW = "allow", "Allow overlapping runs"
    FORBID = "forbid", "Skip while the previous run is running"
    REPLACE = "replace", "Cancel the running run and start the new one"


class CatchUpPolicyChoice(models.TextChoices):
    SKIP = "skip", "Skip to the latest due firing"
    RUN_ONCE = "run_once", "Run once for all missed firings"
    REPLAY_ALL = "replay_all", "Replay every missed firing (bounded)"


class JobSource(models.TextChoices):
    API = "api", "API"
    ADMIN = "admin", "Admin"
    DECORATOR = "decorator", "Declared in code"


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: job_tenant_name (tenant, name) serves lookups by tenant, and every
    # index costs the claim path an update (docs/benchmarks.md, beat engine).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    source = models.CharField(max_length=16, choices=JobSource.choices, default=JobSource.API)

    kind = models.CharField(max_length=16, choices=JobKind.choices)
    cron_expression = models.CharField(max_length=128, blank=True, default="")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Interval firings are anchor + k * interval, so restarts and deploys never shift them.
    anchor_at = models.DateTimeField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")

    target_kind = models.CharField(max_length=16, choices=TargetKind.choices)
    target_name = models.CharField(max_length=255, blank=True, default="")
    target_url = models.CharField(max_length=2048, blank=True, default="")
    target_headers = models.JSONField(default=dict, blank=True)
    payload = models.JSONField(default=dict, blank=True)

    queue = models.CharField(max_length=100, default="scheduler")
    priority = models.PositiveSmallIntegerField(default=5)

    # Not indexed alone: the engine reads through the partial due index, the API by tenant.
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.ACTIVE)
    status_reason = models.CharField(max_length=500, blank=True, default="")
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fire_at = models.DateTimeField(null=True, blank=True)
    partition = models.PositiveSmallIntegerField()

    max_attempts = models.PositiveSmallIntegerField(default=3)
    retry_base_delay = models.DurationField(default=timedelta(seconds=10))
    retry_max_delay = models.DurationField(default=timedelta(minutes=10))
    retry_jitter = models.BooleanField(default=True)
    # HTTP 4xx other than 408/429 are permanent unless the job says they are worth retrying.
    retry_on_client_error = models.BooleanField(default=False)
    timeout = models.DurationField(default=timedelta(minutes=5))
    concurrency_policy = models.CharField(
        max_length=16, choices=ConcurrencyPolicy.choices, default=ConcurrencyPolicy.ALLOW
    )
    catchup_policy = models.CharField(
        max_length=16, choices=CatchUpPolicyChoice.choices, default=CatchUpPolicyChoice.SKIP
    )
    catchup_limit = models.PositiveIntegerField(default=100)
    starting_deadline = models.DurationField(null=True, blank=True)
    jitter_window = models.DurationField(default=timedelta(0))
    critical = models.BooleanField(default=False)
    # Runs of this job running at once (docs/limits.md, "Running concurrency"); null: no limit
    # of its own, only its tenant's.
    max_running_runs = models.PositiveIntegerField(null=True, blank=True)
    # When a dependent job runs for a logical time, judged on its parents' runs (docs/dags.md).
    trigger_rule = models.CharField(
        max_length=16,
        choices=TriggerRule.choices,
        default=TriggerRule.ALL_SUCCESS,
        db_default=TriggerRule.ALL_SUCCESS.value,
    )
    # Per-target rate limit (docs/limits.md, "Per-target rate limits"): the bucket the job's
    # runs take a token from is its group's when named, else its HTTP host's; a rate of its
    # own gives the job a bucket of its own instead of its tenant's for that target.
    target_group = models.CharField(max_length=255, blank=True, default="", db_default="")
    target_rate = models.FloatField(null=True, blank=True)
    target_burst = models.PositiveIntegerField(null=True, blank=True)

    version = models.PositiveIntegerField(default=1)
    # Client-chosen key for idempotent creation, with a hash of the request that used it.
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    request_hash = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The engine's only read path for due work: never a scan of all jobs. The id
            # makes a keyset, so that a refresh pages through jobs tied at one instant.
            models.Index(
                fields=["partition", "next_fire_at", "id"],
                name="job_due_keyset",
                condition=Q(status="active"),
            ),
            models.Index(fields=["tenant", "name"], name="job_tenant_name"),
            models.Index(fields=["tenant", "-created_at"], name="job_tenant_created"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_unique_idempotency_key",
            ),
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=~Q(status="cancelled"),
                name="job_unique_live_name_per_tenant",
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind="once", run_at__isnull=False)
                    | Q(kind="cron", cron_expression__gt="")
                    | Q(kind="interval", interval_seconds__gte=1, anchor_at__isnull=False)
                    | Q(kind="dependent")
                ),
                name="job_schedule_fields_match_kind",
            ),
            models.CheckConstraint(
                condition=(
                    Q(target_kind="http", target_url__gt="")
                    | Q(target_kind__in=["callable", "task"], target_name__gt="")
                ),
                name="job_target_fields_match_kind",
            ),
            models.CheckConstraint(
                condition=~Q(status="active") | Q(next_fire_at__isnull=False) | Q(kind="dependent"),
                name="job_active_has_next_fire",
            ),
            # The engine's claim never sees a dependent job: it fires only through its parents.
            models.CheckConstraint(
                condition=~Q(kind="dependent") | Q(next_fire_at__isnull=True),
                name="job_dependent_has_no_fire",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, max_attempts__lte=100),
                name="job_max_attempts_range",
            ),
            models.CheckConstraint(
                condition=Q(retry_base_delay__gt=timedelta(0))
                & Q(retry_max_delay__gte=models.F("retry_base_delay")),
                name="job_retry_delays_ordered",
            ),
            models.CheckConstraint(
                condition=Q(timeout__gt=timedelta(0)), name="job_timeout_positive"
            ),
            models.CheckConstraint(
                condition=Q(jitter_window__gte=timedelta(0)), name="job_jitter_not_negative"
            ),
            models.CheckConstraint(condition=Q(priority__lte=9), name="job_priority_range"),
            models.CheckConstraint(
                condition=Q(max_running_runs__isnull=True) | Q(max_running_runs__gte=1),
                name="job_max_running_runs_positive",
            ),
            models.CheckConstraint(
                condition=Q(catchup_limit__gte=1, catchup_limit__lte=1000),
                name="job_catchup_limit_range",
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="job_version_positive"),
            models.CheckConstraint(condition=Q(kind__in=JobKind.values), name="job_kind_valid"),
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="job_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(trigger_rule__in=TriggerRule.values), name="job_trigger_rule_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class JobDependency(models.Model):
    """An edge of a tenant's job DAG: ``child`` runs for a logical time after ``parent`` did.

    Written only by jobs.services.dependencies, under the tenant's edge lock, which keeps the
    graph acyclic and every job's roots on one schedule (docs/architecture.md, lock order).
    """

    # No single-column indexes: job_dependency_unique (parent, child) serves reads by parent,
    # job_dependency_child reads by child; the tenant is read through its jobs.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="job_edges", db_index=False
    )
    parent = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="child_edges", db_index=False
    )
    child = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="parent_edges", db_index=False
    )
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = "job dependency"
        verbose_name_plural = "job dependencies"
        indexes = [models.Index(fields=["child"], name="job_dependency_child")]
        constraints = [
            # Its index also serves "children of a parent" (the hand-off's read).
            models.UniqueConstraint(fields=["parent", "child"], name="job_dependency_unique"),
            models.CheckConstraint(
                condition=~Q(parent=models.F("child")), name="job_dependency_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id}"


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    MANUAL = "manual", "Triggered manually"
    CATCH_UP = "catch_up", "Catch-up"
    BACKFILL = "backfill", "Backfill"
    # Created by the hand-off when a parent's run for the same logical time decided it.
    UPSTREAM = "upstream", "After its parents"


class RunIdField(models.UUIDField):  # type: ignore[type-arg]
    """A run's id, derived from its ``scheduled_for`` when the run is first saved (jobs/run_ids.py):
    the id names the run's partition, so it cannot be a random default."""

    def get_pk_value_on_save(self, instance: models.Model) -> uuid.UUID:
        scheduled_for = getattr(instance, "scheduled_for", None)
        if scheduled_for is None:
            raise ValueError("a run needs its scheduled_for before it can have an id")
        return run_id_for(scheduled_for)


class JobRun(models.Model):
    """One logical firing of a job; its attempts are kept in RunAttempt.

    Stored in day partitions of ``scheduled_for`` (docs/history.md, "Partitions"), keyed by an
    id that carries the firing's instant (jobs/run_ids.py).
    """

    id = RunIdField(primary_key=True, editable=False)
    # Both covered by composite indexes below (run_unique_firing, run_tenant_state); separate
    # single-column indexes would only slow the claim's insert and every state change.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs", db_index=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    partition = models.PositiveSmallIntegerField()
    # The logical firing instant; with the job it names the firing, exactly once.
    scheduled_for = models.DateTimeField()
    trigger = models.CharField(
        max_length=16, choices=RunTrigger.choices, default=RunTrigger.SCHEDULE
    )
    state = models.CharField(max_length=16, choices=RunState.choices)
    # When the engine should next act on it: first dispatch (scheduled_for + jitter) or retry.
    due_at = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    # Fencing epoch of the partition owner that queued the current attempt.
    epoch = models.BigIntegerField(default=0)
    dedup_key = models.CharField(max_length=64)
    worker = models.CharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Which limit parked this run in retry_wait without spending an attempt ('' for none):
    # jobs/services/running_limits.py. Cleared by the start.
    held_by = models.CharField(max_length=16, blank=True, default="", db_default="")

    queued_at = models.DateTimeField(null=True, blank=True)
    # When the run's current message was pushed, or last found still waiting in the broker.
    published_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Publish lag of the first attempt: the instant its message went into the broker minus
    # its due instant (scheduled_for + jitter). Set by the engine's published mark, also when
    # a worker started the run before that mark was written.
    lateness = models.DurationField(null=True, blank=True)
    # Start lag of the first attempt: its start minus its due instant, both on the database's
    # clock (the start statement sets it).
    start_lag = models.DurationField(null=True, blank=True)

    last_error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    replayed_count = models.PositiveIntegerField(default=0)
    # The parents' runs for the same logical time (scheduled_for) that decided this run.
    # The database default serves the engine's and backfill's raw INSERTs, which never set it.
    upstream_run_ids = ArrayField(
        models.UUIDField(),
        default=list,
        db_default=models.Value([], output_field=ArrayField(models.UUIDField())),
        blank=True,
    )
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            # A job's runs by firing (its history, newest first) are read through each
            # partition's unique firing index on (job, scheduled_for), scanned backwards
            # (jobs/run_partitions.py): a second index on the same columns was one more entry
            # to write at every claim, start and outcome.
            models.Index(fields=["tenant", "state"], name="run_tenant_state"),
            # Engine timers: pending/retry_wait runs become due.
            models.Index(
                fields=["partition", "due_at"],
                name="run_timer_by_partition",
                condition=Q(state__in=["pending", "retry_wait"]),
            ),
            # Reaper: running attempts whose lease expired.
            models.Index(
                fields=["partition", "lease_until"],
                name="run_lease_by_partition",
                condition=Q(state="running"),
            ),
            # Outbox sweep: queued but never marked published.
            models.Index(
                fields=["partition", "queued_at"],
                name="run_unpublished_by_partition",
                condition=Q(state="queued", published_at__isnull=True),
            ),
            # Outbox sweep: queued, sent, and not started since (beat_engine/sweep.py), oldest
            # first, so LIMIT stops the scan early. The partition is a filter, not a key: with
            # `partition = ANY(...)` in an index condition PostgreSQL 16 costs one index scan
            # per partition, and prefers sorting every in-flight run instead.
            models.Index(
                fields=["published_at"],
                name="run_sent_unstarted",
                condition=Q(state="queued", published_at__isnull=False),
            ),
            # Sustained-lateness check (jobs.services.lateness_alerts): recent runs by creation
            # time. BRIN keeps one summary per range of pages, so inserts cost next to nothing
            # and, on PostgreSQL 16, updates of a run stay HOT.
            BrinIndex(fields=["created_at"], name="run_created_brin", autosummarize=True),
            # Running limits: a tenant's (a job's) parked runs, oldest firing first, and the
            # released ones on their way to a worker (jobs/services/running_limits.py).
            models.Index(
                fields=["tenant", "scheduled_for", "id"],
                name="run_held_by_tenant",
                condition=Q(state__in=["queued", "retry_wait"], held_by="tenant_running"),
            ),
            models.Index(
                fields=["job", "scheduled_for", "id"],
                name="run_held_by_job",
                condition=Q(state__in=["queued", "retry_wait"], held_by="job_running"),
            ),
            # Concurrency policy: the job's runs in flight (jobs.states.IN_FLIGHT_STATES).
            models.Index(
                fields=["job"],
                name="run_in_flight_by_job",
                condition=Q(state__in=["queued", "running", "retry_wait"]),
            ),
            # The admin's run list, newest firing first (docs/history.md, "Readers"): without
            # it every page view sorted the whole table.
            models.Index(fields=["-scheduled_for", "-id"], name="run_by_firing"),
        ]
        constraints = [
            # One run per firing (docs/architecture.md, Invariants): the database decides.
            models.UniqueConstraint(fields=["job", "scheduled_for"], name="run_unique_firing"),
            models.CheckConstraint(condition=Q(state__in=RunState.values), name="run_state_valid"),
            models.CheckConstraint(
                condition=~Q(state__in=["pending", "retry_wait"]) | Q(due_at__isnull=False),
                name="run_timer_states_have_due_at",
            ),
            models.CheckConstraint(
                condition=~Q(state="running")
                | Q(lease_until__isnull=False, started_at__isnull=False, attempt__gte=1),
                name="run_running_has_lease",
            ),
            models.CheckConstraint(
                condition=~Q(state="queued") | Q(attempt__gte=1, queued_at__isnull=False),
                name="run_queued_has_attempt",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=["succeeded", "failed", "dead"])
                | Q(finished_at__isnull=False, attempt__gte=1),
                name="run_finished_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}@{self.scheduled_for.isoformat()} [{self.state}]"

    @property
    def is_terminal(self) -> bool:
        from jobs.states import TERMINAL_STATES

        return RunState(self.state) in TERMINAL_STATES


class RunAttempt(models.Model):
    """One attempt at a run: who ran it, when, and how it ended."""

    # Read by run through attempt_unique_per_run (run, attempt): an index on the run alone was
    # one more entry to write at every start.
    run = models.ForeignKey(
        JobRun, on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    attempt = models.PositiveIntegerField()
    epoch = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True, default="")
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=AttemptOutcome.choices, blank=True, default=""
    )
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt"], name="attempt_unique_per_run"),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="attempt_positive"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of {self.run_id}"


class DedupKey(models.Model):
    """Idempotency key of a completed firing (or a client-chosen key), kept for a window."""

    key = models.CharField(max_length=128, primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dedup_keys")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True)
    run = models.ForeignKey(JobRun, on_delete=models.SET_NULL, null=True, blank=True)
    outcome = models.CharField(max_length=32, default="succeeded")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "dedup key"
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")),
                name="dedup_expires_after_created",
            )
        ]

    def __str__(self) -> str:
        return self.key


class DeadLetter(models.Model):
    """A run that failed its last attempt, kept for people to inspect and replay."""

    run = models.OneToOneField(JobRun, on_delete=models.CASCADE, related_name="dead_letter")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dead_letters")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dead_letters")
    attempts = models.PositiveIntegerField()
    last_error = models.TextField(blank=True, default="")
    moved_at = models.DateTimeField()
    replayed_at = models.DateTimeField(null=True, blank=True)
    replay_count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-moved_at"], name="dead_letter_tenant_moved"),
            # Retention: closed dead letters by their last replay (docs/history.md).
            models.Index(
                fields=["replayed_at"],
                name="dead_letter_replayed",
                condition=Q(replayed_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(attempts__gte=1), name="dead_letter_attempts")
        ]

    def __str__(self) -> str:
        return f"dead letter for run {self.run_id}"


class PartitionEpoch(models.Model):
    """Highest fencing epoch the database has issued for a partition.

    No stale fence (docs/architecture.md, Invariants): epochs come from here, not from Redis,
    so they never go backwards even when Redis loses its keys; every claim checks that the
    stored epoch is still the claimer's.
    """

    partition = models.PositiveSmallIntegerField(primary_key=True)
    epoch = models.BigIntegerField(default=0)
    owner = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"partition {self.partition} @ epoch {self.epoch}"


# Recorded decisions (why a firing did not run or ran late) and notification webhooks with
# their delivery outbox live in modules of their own; imported here so that Django registers
# them with the app.
from jobs.models_archive import ArchivedDay  # noqa: E402
from jobs.models_notifications import (  # noqa: E402
    LatenessAlert,
    NotificationDelivery,
    NotificationWebhook,
)
from jobs.models_reasons import DecisionReason, JobEvent  # noqa: E402
from jobs.models_target_limits import TargetLimit  # noqa: E402

__all__ = [
    "ArchivedDay",
    "DecisionReason",
    "JobEvent",
    "LatenessAlert",
    "NotificationDelivery",
    "NotificationWebhook",
    "TargetLimit",
]
