# Notification webhooks per tenant, their delivery outbox and the once-per-window record of
# sustained lateness; a BRIN index on runs' creation time for the lateness check.

import uuid

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_decision_reasons")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="LatenessAlert",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("window_start", models.DateTimeField()),
                ("p99_s", models.FloatField()),
                ("runs", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="NotificationDelivery",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "event",
                    models.CharField(
                        choices=[
                            ("dead_letter", "A run was dead-lettered"),
                            ("sustained_lateness", "Lateness p99 stayed above the threshold"),
                        ],
                        max_length=32,
                    ),
                ),
                ("event_key", models.CharField(max_length=200)),
                ("payload", models.JSONField()),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("delivered", "Delivered"),
                            ("failed", "Failed after every attempt"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField()),
                ("claimed_until", models.DateTimeField(blank=True, null=True)),
                ("last_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("last_error", models.CharField(blank=True, default="", max_length=500)),
                ("created_at", models.DateTimeField()),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "notification deliveries",
            },
        ),
        migrations.CreateModel(
            name="NotificationWebhook",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                ("url", models.CharField(max_length=2048)),
                (
                    "events",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(
                            choices=[
                                ("dead_letter", "A run was dead-lettered"),
                                ("sustained_lateness", "Lateness p99 stayed above the threshold"),
                            ],
                            max_length=32,
                        ),
                        size=None,
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("secret_version", models.PositiveIntegerField(default=1)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
            ],
        ),
        migrations.AddIndex(
            model_name="jobrun",
            index=django.contrib.postgres.indexes.BrinIndex(
                autosummarize=True, fields=["created_at"], name="run_created_brin"
            ),
        ),
        migrations.AddField(
            model_name="latenessalert",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="lateness_alerts",
                to="jobs.tenant",
            ),
        ),
        migrations.AddField(
            model_name="notificationdelivery",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="jobs.tenant",
            ),
        ),
        migrations.AddField(
            model_name="notificationwebhook",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="webhooks",
                to="jobs.tenant",
            ),
        ),
        migrations.AddField(
            model_name="notificationdelivery",
            name="webhook",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="jobs.notificationwebhook",
            ),
        ),
        migrations.AddIndex(
            model_name="latenessalert",
            index=models.Index(fields=["created_at"], name="lateness_alert_by_time"),
        ),
        migrations.AddConstraint(
            model_name="latenessalert",
            constraint=models.UniqueConstraint(
                fields=("tenant", "window_start"), name="lateness_alert_once_per_window"
            ),
        ),
        migrations.AddConstraint(
            model_name="notificationwebhook",
            constraint=models.UniqueConstraint(
                fields=("tenant", "name"), name="webhook_unique_name"
            ),
        ),
        migrations.AddConstraint(
            model_name="notificationwebhook",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("events__contained_by", ["dead_letter", "sustained_lateness"]),
                    models.Q(("events", []), _negated=True),
                ),
                name="webhook_events_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="notificationdelivery",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["next_attempt_at"],
                name="delivery_pending_due",
            ),
        ),
        migrations.AddIndex(
            model_name="notificationdelivery",
            index=models.Index(fields=["created_at"], name="delivery_by_time"),
        ),
        migrations.AddConstraint(
            model_name="notificationdelivery",
            constraint=models.UniqueConstraint(
                fields=("webhook", "event_key"), name="delivery_once_per_event"
            ),
        ),
        migrations.AddConstraint(
            model_name="notificationdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("state__in", ["pending", "delivered", "failed"])),
                name="delivery_state_valid",
            ),
        ),
    ]
