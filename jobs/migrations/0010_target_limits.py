import django.db.models.deletion
from django.db import migrations, models

REASON_KINDS = [
    ("missed_catch_up", "Missed by catch-up policy"),
    ("deferred_tenant_limit", "Deferred by tenant limit"),
    ("deferred_target_limit", "Deferred by target rate limit"),
    ("throttled_by_target", "Throttled by its target"),
]


class Migration(migrations.Migration):
    dependencies = [("jobs", "0009_running_limits")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="TargetLimit",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("target", models.CharField(max_length=255)),
                ("rate_per_s", models.FloatField()),
                ("burst", models.PositiveIntegerField(default=1)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="target_limits",
                        to="jobs.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "target"), name="target_limit_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("burst__gte", 1), ("rate_per_s__gt", 0)),
                        name="target_limit_positive",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="target_group",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AddField(
            model_name="job",
            name="target_rate",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="target_burst",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RemoveConstraint(model_name="decisionreason", name="decision_reason_kind_valid"),
        migrations.AlterField(
            model_name="decisionreason",
            name="kind",
            field=models.CharField(choices=REASON_KINDS, max_length=32),
        ),
        migrations.AddConstraint(
            model_name="decisionreason",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", [kind for kind, _label in REASON_KINDS])),
                name="decision_reason_kind_valid",
            ),
        ),
    ]
