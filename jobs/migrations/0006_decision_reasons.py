# Recorded decisions: operators' job changes (JobEvent) and the engine's decisions that leave
# no run or delay one (DecisionReason), both bounded and purged after a retention.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_dependencies")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="JobEvent",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("paused", "Paused"),
                            ("resumed", "Resumed"),
                            ("cancelled", "Cancelled"),
                            ("updated", "Definition changed"),
                        ],
                        max_length=16,
                    ),
                ),
                ("at", models.DateTimeField()),
                ("version", models.PositiveIntegerField()),
                ("detail", models.JSONField(blank=True, default=dict)),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="jobs.job",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="job_events",
                        to="jobs.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["job", "at"], name="job_event_by_job"),
                    models.Index(fields=["at"], name="job_event_by_time"),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("kind__in", ["paused", "resumed", "cancelled", "updated"])
                        ),
                        name="job_event_kind_valid",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="DecisionReason",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("missed_catch_up", "Missed by catch-up policy"),
                            ("deferred_tenant_limit", "Deferred by tenant limit"),
                        ],
                        max_length=32,
                    ),
                ),
                ("first_at", models.DateTimeField()),
                ("last_at", models.DateTimeField()),
                ("count", models.PositiveBigIntegerField()),
                ("recorded_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("detail", models.CharField(blank=True, default="", max_length=200)),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="decision_reasons",
                        to="jobs.job",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="decision_reasons",
                        to="jobs.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["updated_at"], name="decision_reason_by_time"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "kind", "first_at"), name="decision_reason_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("kind__in", ["missed_catch_up", "deferred_tenant_limit"])
                        ),
                        name="decision_reason_kind_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("count__gte", 1), ("last_at__gte", models.F("first_at"))
                        ),
                        name="decision_reason_range",
                    ),
                ],
            },
        ),
    ]
