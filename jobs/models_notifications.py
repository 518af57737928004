"""Per-tenant notification webhooks and their delivery outbox (docs/operations.md,
"Notifications").

A webhook names the events it wants (dead letters, sustained lateness). An event writes one
``NotificationDelivery`` row per subscribed webhook in the transaction that decides it (the
dead letter's, or the lateness check's), and nothing else: the HTTP call is made later by the
beat nodes' delivery thread, so a slow or failing receiver never delays a run. The unique
``(webhook, event_key)`` makes "once per dead letter" and "once per lateness window" a fact the
database keeps, whichever node or worker raced to record it.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q


class NotificationEvent(models.TextChoices):
    DEAD_LETTER = "dead_letter", "A run was dead-lettered"
    SUSTAINED_LATENESS = "sustained_lateness", "Lateness p99 stayed above the threshold"


class NotificationWebhook(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="webhooks", db_index=False
    )
    name = models.CharField(max_length=100)
    url = models.CharField(max_length=2048)
    events = ArrayField(models.CharField(max_length=32, choices=NotificationEvent.choices))
    enabled = models.BooleanField(default=True)
    # The signing secret is not stored: it is derived from SCHEDULER_WEBHOOK_SIGNING_KEY, the
    # webhook's id and this counter (jobs.services.webhooks.webhook_secret); raising the counter
    # rotates it.
    secret_version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Also the index of a tenant's webhooks (tenant first).
            models.UniqueConstraint(fields=["tenant", "name"], name="webhook_unique_name"),
            models.CheckConstraint(
                condition=Q(events__contained_by=NotificationEvent.values) & ~Q(events=[]),
                name="webhook_events_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed after every attempt"


class NotificationDelivery(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(
        NotificationWebhook, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    # What makes the event one event: "dead_letter:<run>:<replay count>" or
    # "sustained_lateness:<window start>"; unique per webhook.
    event_key = models.CharField(max_length=200)
    payload = models.JSONField()
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # Held by the node sending it until then; past it another node may take it over.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "notification deliveries"
        indexes = [
            # The delivery thread's only read: pending rows by due time.
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_pending_due",
                condition=Q(state="pending"),
            ),
            models.Index(fields=["created_at"], name="delivery_by_time"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "event_key"], name="delivery_once_per_event"
            ),
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="delivery_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.webhook_id} [{self.state}]"


class LatenessAlert(models.Model):
    """A tenant's sustained lateness in one window, recorded once whoever detects it."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="lateness_alerts", db_index=False
    )
    window_start = models.DateTimeField()
    p99_s = models.FloatField()
    runs = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="lateness_alert_by_time")]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "window_start"], name="lateness_alert_once_per_window"
            )
        ]

    def __str__(self) -> str:
        return f"lateness p99 {self.p99_s:.3f} s for {self.tenant_id} at {self.window_start}"
